"""C2SP signed notes and tlog checkpoints (Ed25519 only).

A signed note is a text ending in a newline, a blank line, and one or more lines
``— <key name> <base64(4-byte key id || signature)>``. A checkpoint is a note whose text is the
log origin, the tree size and the base64 root hash, each on its own line.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ledger._errors import NoteError
from ledger._keys import SigningKey, VerifierKey

EM_DASH = "\u2014"
MAX_SIGNATURES = 100


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note."""

    name: str
    key_id: bytes
    signature: bytes

    @property
    def line(self) -> str:
        """The signature line as written in the note, newline included."""
        blob = base64.b64encode(self.key_id + self.signature).decode()
        return f"{EM_DASH} {self.name} {blob}\n"


@dataclass(frozen=True)
class Note:
    """A parsed note: its text and all of its signature lines (verified or not)."""

    text: str
    signatures: tuple[NoteSignature, ...]
    verified: tuple[VerifierKey, ...] = field(default=())

    def render(self) -> str:
        """Return the note in its wire form."""
        return self.text + "\n" + "".join(s.line for s in self.signatures)


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("malformed note: text must end with a newline")
    for ch in text:
        if ord(ch) < 0x20 and ch != "\n":
            raise NoteError(f"malformed note: control character U+{ord(ch):04X} in text")


def sign_note(text: str, keys: Sequence[SigningKey]) -> str:
    """Sign ``text`` with every key and return the signed note."""
    _check_text(text)
    if not keys:
        raise NoteError("a note needs at least one signing key")
    message = text.encode("utf-8")
    sigs = tuple(NoteSignature(k.name, k.verifier.key_id, k.sign(message)) for k in keys)
    return Note(text, sigs).render()


def parse_note(data: str | bytes) -> Note:
    """Parse a signed note without verifying it. Raises :class:`NoteError` when malformed."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NoteError("malformed note: not valid UTF-8") from exc
    for ch in data:
        if ord(ch) < 0x20 and ch != "\n":
            raise NoteError(f"malformed note: control character U+{ord(ch):04X}")
    if not data.endswith("\n"):
        raise NoteError("malformed note: it must end with a newline")
    split = data.rfind("\n\n")
    if split < 0:
        raise NoteError("malformed note: no blank line before the signatures")
    text, sig_block = data[: split + 1], data[split + 2 :]
    lines = sig_block.split("\n")[:-1]
    if not lines:
        raise NoteError("malformed note: no signature lines")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"malformed note: more than {MAX_SIGNATURES} signatures")
    sigs: list[NoteSignature] = []
    for number, line in enumerate(lines, 1):
        prefix = EM_DASH + " "
        if not line.startswith(prefix):
            raise NoteError(f"malformed note: signature line {number} does not start with '— '")
        parts = line[len(prefix) :].split(" ")
        if len(parts) != 2 or not parts[0] or "+" in parts[0]:
            raise NoteError(f"malformed note: signature line {number} is not '— <name> <base64>'")
        name, blob = parts
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise NoteError(f"malformed note: signature line {number} is not base64") from exc
        if len(raw) < 5:
            raise NoteError(f"malformed note: signature line {number} is too short")
        sigs.append(NoteSignature(name, raw[:4], raw[4:]))
    return Note(text, tuple(sigs))


def open_note(data: str | bytes, known: Iterable[VerifierKey]) -> Note:
    """Parse and verify a note against known keys, following the C2SP rules.

    Signatures by unknown keys (no key with the same name *and* key id) are ignored. A signature
    by a known key that fails to verify rejects the whole note, and so does a note with no
    verifying signature from a known key. The returned note lists the keys that verified.
    """
    note = parse_note(data)
    by_id: dict[tuple[str, bytes], VerifierKey] = {}
    for key in known:
        by_id[(key.name, key.key_id)] = key
    message = note.text.encode("utf-8")
    verified: list[VerifierKey] = []
    for sig in note.signatures:
        match = by_id.get((sig.name, sig.key_id))
        if match is None:
            continue
        if not match.verify(message, sig.signature):
            raise NoteError(f"invalid signature for key {match.actor}")
        if match not in verified:
            verified.append(match)
    if not verified:
        raise NoteError("note has no verifiable signatures from a known key")
    return Note(note.text, note.signatures, tuple(verified))


@dataclass(frozen=True)
class Checkpoint:
    """A tlog checkpoint: origin, tree size, root hash, and any extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        """The note text (the signed message)."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "\n".join([*lines, *self.extensions]) + "\n"

    def sign(self, keys: Sequence[SigningKey]) -> str:
        """Return the checkpoint signed by ``keys`` as a signed note."""
        return sign_note(self.text(), keys)

    @classmethod
    def from_text(cls, text: str) -> Checkpoint:
        """Parse a checkpoint's note text. Raises :class:`NoteError` when malformed."""
        lines = text.split("\n")
        if lines[-1] != "" or len(lines) < 4:
            raise NoteError("malformed checkpoint: expected origin, size and root lines")
        origin, size_s, root_s, *ext = lines[:-1]
        if not origin:
            raise NoteError("malformed checkpoint: empty origin")
        if not size_s.isdigit() or not size_s.isascii() or (size_s != "0" and size_s[0] == "0"):
            raise NoteError(f"malformed checkpoint: tree size {size_s!r} is not a decimal number")
        try:
            root = base64.b64decode(root_s, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise NoteError("malformed checkpoint: root hash is not base64") from exc
        if len(root) != 32:
            raise NoteError("malformed checkpoint: root hash is not 32 bytes")
        if any(not e for e in ext):
            raise NoteError("malformed checkpoint: empty extension line")
        return cls(origin, int(size_s), root, tuple(ext))


def parse_checkpoint(data: str | bytes) -> tuple[Checkpoint, Note]:
    """Parse a signed checkpoint without verifying its signatures."""
    note = parse_note(data)
    return Checkpoint.from_text(note.text), note


def open_checkpoint(data: str | bytes, known: Iterable[VerifierKey]) -> tuple[Checkpoint, Note]:
    """Parse a signed checkpoint and verify it against known keys (see :func:`open_note`)."""
    note = open_note(data, known)
    return Checkpoint.from_text(note.text), note
