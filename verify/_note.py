"""C2SP signed notes, Ed25519 verifier keys (vkeys) and tlog checkpoints.

Written from c2sp.org/signed-note, c2sp.org/tlog-checkpoint and ``docs/ledger-format.md`` §4-§5,
with the parsing rules of ``golang.org/x/mod/sumdb/note`` (whose test vectors pin this module):

* a note is UTF-8 text with no control character but newline; the text ends with a newline and is
  separated from one or more signature lines by its *last* blank line;
* a signature line is ``— <key name> <base64(4-byte key id || signature)>`` and a newline;
* signatures of unknown keys (name and key id matching no known key) are ignored; a signature of a
  known key that does not verify makes the note invalid; a note with no verifying signature of a
  known key is invalid; more than 100 signature lines make the note malformed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from verify._errors import (
    AmbiguousKeyError,
    CheckpointFormatError,
    InvalidSignatureError,
    KeyFormatError,
    MalformedNoteError,
    UnverifiedNoteError,
)

__all__ = [
    "MAX_NOTE_SIGNATURES",
    "Checkpoint",
    "Note",
    "NoteSignature",
    "Vkey",
    "compute_key_id",
    "is_valid_key_name",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_note",
    "parse_vkey",
]

MAX_NOTE_SIGNATURES = 100
"""Notes with more signature lines than this are malformed (C2SP requires accepting at least 16)."""

_ALG_ED25519 = 0x01
_MAX_KEY_NAME = 128
_SIG_PREFIX = "\u2014 "  # EM DASH, SPACE
_HEX8 = re.compile(r"[0-9a-f]{8}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")
_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")


def is_valid_key_name(name: str, *, max_length: int | None = _MAX_KEY_NAME) -> bool:
    """Return whether ``name`` is a valid key name: non-empty, no Unicode white space, no ``+``.

    ``max_length`` (128 by default, ``docs/ledger-format.md`` §4) may be ``None`` for no limit, as
    signed notes themselves have none.
    """
    if not name or "+" in name or (max_length is not None and len(name) > max_length):
        return False
    return not any(c.isspace() for c in name)


def compute_key_id(name: str, key: bytes) -> int:
    """Return the C2SP key id: the first 4 bytes (big-endian) of ``SHA-256(name || 0x0A || key)``.

    ``key`` is the algorithm byte followed by the public key (``0x01 || 32 bytes`` for Ed25519).
    """
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + key).digest()
    return int.from_bytes(digest[:4], "big")


def _b64decode_strict(text: str) -> bytes:
    """Decode standard padded base64; raise ``ValueError`` unless ``text`` is canonical."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


@dataclass(frozen=True)
class Vkey:
    """A parsed Ed25519 verifier key: ``<name>+<8 hex key id>+<base64(0x01 || public key)>``."""

    name: str
    key_id: int
    public_key: bytes
    _key: Ed25519PublicKey = field(repr=False, compare=False, hash=False)

    @property
    def actor(self) -> str:
        """The actor id: the vkey without its last part (``<name>+<8 hex key id>``)."""
        return f"{self.name}+{self.key_id:08x}"

    @property
    def text(self) -> str:
        """The vkey in its string form."""
        raw = bytes([_ALG_ED25519]) + self.public_key
        return f"{self.actor}+{base64.b64encode(raw).decode('ascii')}"

    def __str__(self) -> str:
        return self.text

    @property
    def ed25519(self) -> Ed25519PublicKey:
        """The key as a ``cryptography`` Ed25519 public key object."""
        return self._key

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Return whether ``signature`` is a valid Ed25519 signature of ``message`` by this key."""
        if len(signature) != 64:
            return False
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


def parse_vkey(vkey: str) -> Vkey:
    """Parse and check a vkey; raise :class:`KeyFormatError` naming the problem.

    The key id must be 8 lowercase hex digits and equal the id computed from the name and key; the
    key must be Ed25519 (algorithm byte ``0x01``) of exactly 32 bytes; base64 must be canonical.
    """
    if not isinstance(vkey, str):
        raise KeyFormatError(f"vkey must be a string, not {type(vkey).__name__}")
    shown = vkey if len(vkey) <= 200 else vkey[:200] + "…"
    name, _, rest = vkey.partition("+")
    id_hex, _, key64 = rest.partition("+")
    if not is_valid_key_name(name):
        raise KeyFormatError(f"invalid vkey {shown!r}: bad key name {name!r}")
    if not _HEX8.fullmatch(id_hex):
        raise KeyFormatError(f"invalid vkey {shown!r}: key id must be 8 lowercase hex digits")
    try:
        key = _b64decode_strict(key64)
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise KeyFormatError(f"invalid vkey {shown!r}: public key is not valid base64") from None
    if not key:
        raise KeyFormatError(f"invalid vkey {shown!r}: empty public key")
    key_id = int(id_hex, 16)
    if compute_key_id(name, key) != key_id:
        raise KeyFormatError(f"invalid vkey {shown!r}: key id does not match the name and key")
    if key[0] != _ALG_ED25519:
        raise KeyFormatError(f"invalid vkey {shown!r}: unknown algorithm 0x{key[0]:02x}")
    if len(key) != 33:
        raise KeyFormatError(f"invalid vkey {shown!r}: Ed25519 key must be 32 bytes")
    try:
        pub = Ed25519PublicKey.from_public_bytes(key[1:])
    except ValueError:
        raise KeyFormatError(f"invalid vkey {shown!r}: not an Ed25519 public key") from None
    return Vkey(name=name, key_id=key_id, public_key=key[1:], _key=pub)


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note."""

    name: str
    key_id: int
    signature: bytes
    """The signature bytes after the 4-byte key id."""

    @property
    def key_label(self) -> str:
        """``<name>+<8 hex key id>``, the way keys are named in messages."""
        return f"{self.name}+{self.key_id:08x}"


@dataclass(frozen=True)
class Note:
    """An opened (verified) note."""

    text: str
    """The signed text, including its final newline."""
    verified: tuple[NoteSignature, ...]
    """Signatures of known keys, all verified, one per key."""
    verified_by: tuple[Vkey, ...]
    """The known keys whose signatures verified, in the order of ``verified``."""
    unverified: tuple[NoteSignature, ...]
    """Signatures of unknown keys (ignored), without repeats."""


def _decode_note(msg: str | bytes) -> str:
    if isinstance(msg, bytes):
        try:
            return msg.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedNoteError("malformed note: not valid UTF-8") from None
    if not isinstance(msg, str):
        raise MalformedNoteError(f"malformed note: expected str or bytes, not {type(msg).__name__}")
    try:
        msg.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedNoteError("malformed note: not valid UTF-8") from None
    return msg


def parse_note(msg: str | bytes) -> tuple[str, list[NoteSignature]]:
    """Split a note into its signed text and signature lines, checking syntax only.

    Raises :class:`MalformedNoteError` (message ``"malformed note: …"``) for any syntax error.
    """
    note = _decode_note(msg)
    bad = _CONTROL.search(note)
    if bad:
        raise MalformedNoteError(
            f"malformed note: control character U+{ord(bad.group()):04X} at offset {bad.start()}"
        )
    split = note.rfind("\n\n")
    if split < 0:
        raise MalformedNoteError("malformed note: no blank line before the signature lines")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise MalformedNoteError("malformed note: no signature lines")
    if not block.endswith("\n"):
        raise MalformedNoteError(
            "malformed note: the last signature line does not end in a newline"
        )
    lines = block[:-1].split("\n")
    if len(lines) > MAX_NOTE_SIGNATURES:
        raise MalformedNoteError(
            f"malformed note: {len(lines)} signature lines, more than {MAX_NOTE_SIGNATURES}"
        )
    sigs: list[NoteSignature] = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_SIG_PREFIX):
            raise MalformedNoteError(
                f"malformed note: signature line {number} does not start with '\u2014 '"
            )
        name, _, b64 = line[len(_SIG_PREFIX) :].partition(" ")
        if not is_valid_key_name(name, max_length=None):
            raise MalformedNoteError(f"malformed note: signature line {number}: bad key name")
        try:
            raw = _b64decode_strict(b64) if b64 else b""
        except (ValueError, binascii.Error, UnicodeEncodeError):
            raw = b""
        if len(raw) < 5:
            raise MalformedNoteError(
                f"malformed note: signature line {number}: signature is not valid base64 of "
                "a key id and a signature"
            )
        sigs.append(NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    return text, sigs


def _key_table(known_keys: Iterable[Vkey]) -> dict[tuple[str, int], list[Vkey]]:
    table: dict[tuple[str, int], list[Vkey]] = {}
    for key in known_keys:
        same = table.setdefault((key.name, key.key_id), [])
        if all(k.public_key != key.public_key for k in same):
            same.append(key)
    return table


def open_note(msg: str | bytes, known_keys: Iterable[Vkey]) -> Note:
    """Parse a signed note and verify it against ``known_keys``.

    Signatures of unknown keys are ignored; a failing signature of a known key raises
    :class:`InvalidSignatureError`; no verifying known signature raises
    :class:`UnverifiedNoteError`; bad syntax raises :class:`MalformedNoteError`; two different known
    keys with one name and key id raise :class:`AmbiguousKeyError` when a signature names them.
    """
    text, sigs = parse_note(msg)
    table = _key_table(known_keys)
    message = text.encode("utf-8")
    verified: list[NoteSignature] = []
    verified_by: list[Vkey] = []
    unverified: list[NoteSignature] = []
    for sig in sigs:
        keys = table.get((sig.name, sig.key_id))
        if keys is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if len(keys) > 1:
            raise AmbiguousKeyError(f"ambiguous key {sig.key_label}")
        key = keys[0]
        if not key.verify(message, sig.signature):
            raise InvalidSignatureError(f"invalid signature for key {sig.key_label}")
        if key not in verified_by:
            verified.append(sig)
            verified_by.append(key)
    if not verified:
        seen = ", ".join(s.key_label for s in unverified)
        raise UnverifiedNoteError(
            f"note has no verifiable signatures (signed by {seen}; none is a known key)"
        )
    return Note(text, tuple(verified), tuple(verified_by), tuple(unverified))


class Checkpoint(NamedTuple):
    """The body of a C2SP tlog-checkpoint."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse a checkpoint body (the signed text of the note): origin, size, root and extensions.

    Raises :class:`CheckpointFormatError` unless ``text`` is
    ``<origin>\\n<size>\\n<base64 root>\\n`` followed by zero or more non-empty extension lines,
    each ending in a newline.
    """
    if not isinstance(text, str) or not text.endswith("\n"):
        raise CheckpointFormatError("checkpoint: text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointFormatError("checkpoint: needs origin, size and root lines")
    origin, size_text, root_text, *ext = lines
    if not origin:
        raise CheckpointFormatError("checkpoint: empty origin line")
    if not _SIZE.fullmatch(size_text) or int(size_text) >= 1 << 64:
        raise CheckpointFormatError(
            f"checkpoint: tree size {size_text[:40]!r} is not a decimal number "
            "without leading zeros"
        )
    try:
        root = _b64decode_strict(root_text)
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise CheckpointFormatError("checkpoint: root hash is not valid base64") from None
    if len(root) != 32:
        raise CheckpointFormatError(f"checkpoint: root hash is {len(root)} bytes, not 32")
    if any(not line for line in ext):
        raise CheckpointFormatError("checkpoint: empty extension line")
    return Checkpoint(origin, int(size_text), root, tuple(ext))


def open_checkpoint(msg: str | bytes, known_keys: Sequence[Vkey]) -> tuple[Note, Checkpoint]:
    """Open a checkpoint note (:func:`open_note`); parse its text (:func:`parse_checkpoint`)."""
    note = open_note(msg, known_keys)
    return note, parse_checkpoint(note.text)
