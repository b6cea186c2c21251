"""Receipts: C2SP tlog-proof files proving one event is in a witnessed checkpoint.

A receipt (``docs/service.md`` §4) is a ``c2sp.org/tlog-proof@v1`` text::

    c2sp.org/tlog-proof@v1
    extra <base64 of the event's envelope bytes>
    index <seq>
    <base64 hash>                       the RFC 6962 inclusion proof, leaf's sibling first
    ...

    <the checkpoint, verbatim: origin, size, root, blank line, the log's and witnesses' lines>

The ``extra`` data is not trusted: it is hashed (SHA-256(0x00 || envelope)) and that leaf hash
must be proven at ``index`` under the checkpoint's root, the checkpoint signed by a trusted log
key and cosigned by the quorum of trusted witnesses. The envelope's ``seq`` must equal the index.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger._errors import LedgerError, NoteError
from ledger._keys import VerifierKey
from ledger._merkle import leaf_hash, verify_inclusion
from ledger._note import Checkpoint, open_checkpoint, parse_note

__all__ = [
    "HEADER",
    "Receipt",
    "ReceiptCheck",
    "ReceiptError",
    "cosigned_by",
    "make_receipt",
    "parse_receipt",
    "verify_receipt",
]

HEADER = "c2sp.org/tlog-proof@v1"
MAX_PROOF = 63


class ReceiptError(LedgerError):
    """A receipt that is malformed or does not prove what it claims."""


@dataclass(frozen=True)
class Receipt:
    """A parsed tlog-proof: the extra data (an envelope), the index, the path, the checkpoint."""

    extra: bytes | None
    index: int
    path: tuple[bytes, ...]
    note: str


def make_receipt(envelope: bytes, index: int, path: Sequence[bytes], note: str) -> str:
    """Render a receipt for the event at ``index`` with its inclusion ``path`` under ``note``."""
    lines = [HEADER, "extra " + base64.b64encode(envelope).decode(), f"index {index}"]
    lines += [base64.b64encode(h).decode() for h in path]
    return "\n".join(lines) + "\n\n" + note


def parse_receipt(text: str | bytes, what: str = "receipt") -> Receipt:
    """Parse a tlog-proof; raise :class:`ReceiptError` naming the line at fault."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReceiptError(f"{what}: not UTF-8 text") from exc
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise ReceiptError(f"{what}: no blank line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != HEADER:
        raise ReceiptError(f"{what}: line 1 is not {HEADER!r}")
    pos = 1
    extra = None
    if pos < len(lines) and lines[pos].startswith("extra "):
        try:
            extra = base64.b64decode(lines[pos][6:], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ReceiptError(f"{what}: line {pos + 1}: extra data is not base64") from exc
        pos += 1
    if pos >= len(lines) or not lines[pos].startswith("index "):
        raise ReceiptError(f"{what}: line {pos + 1} is not 'index <N>'")
    digits = lines[pos][6:]
    if not digits.isascii() or not digits.isdigit() or (digits != "0" and digits[0] == "0"):
        raise ReceiptError(f"{what}: line {pos + 1}: index {digits!r} is not a decimal number")
    index = int(digits)
    path: list[bytes] = []
    for number, line in enumerate(lines[pos + 1 :], pos + 2):
        try:
            h = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ReceiptError(f"{what}: line {number} is not a base64 hash") from exc
        if len(h) != 32:
            raise ReceiptError(f"{what}: line {number} is not a 32-byte hash")
        path.append(h)
    if len(path) > MAX_PROOF:
        raise ReceiptError(f"{what}: more than {MAX_PROOF} proof hashes")
    return Receipt(extra, index, tuple(path), note)


def cosigned_by(note: str, witnesses: Sequence[str]) -> list[str]:
    """The names of the witnesses (cosigner vkeys) whose valid cosignature ``note`` carries.

    A line by a witness in ``witnesses`` that does not verify raises :class:`NoteError`.
    """
    from ledger.witness import CosignerVerifier

    parsed = parse_note(note)
    names: list[str] = []
    for vkey in witnesses:
        verifier = CosignerVerifier.parse(vkey)
        for sig in parsed.signatures:
            if verifier.verify_line(parsed.text, sig.line) is not None:
                names.append(verifier.name)
                break
    return names


@dataclass
class ReceiptCheck:
    """The outcome of :func:`verify_receipt`: what was proven, or the reasons it was not."""

    index: int
    size: int = 0
    origin: str = ""
    kind: str = ""
    envelope: dict[str, object] = field(default_factory=dict)
    signed_by: list[str] = field(default_factory=list)
    cosigned_by: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems


def verify_receipt(
    text: str | bytes,
    trusted: Sequence[VerifierKey],
    witnesses: Sequence[str] = (),
    quorum: int | None = None,
    what: str = "receipt",
) -> ReceiptCheck:
    """Check a receipt offline against trusted log keys and witness vkeys (default quorum: all).

    Returns a :class:`ReceiptCheck` whose ``problems`` list every failed check; a malformed
    receipt raises :class:`ReceiptError`.
    """
    receipt = parse_receipt(text, what)
    check = ReceiptCheck(receipt.index)
    raw = text.encode("utf-8") if isinstance(text, str) else text
    try:
        canonical = make_receipt(
            receipt.extra or b"", receipt.index, receipt.path, parse_note(receipt.note).render()
        )
    except NoteError as exc:
        check.problems.append(f"the checkpoint is not a signed note ({exc})")
        return check
    if receipt.extra is not None and canonical.encode("utf-8") != raw:
        check.problems.append(
            "the receipt is not in canonical form (base64 with stray bits, or extra bytes)"
        )
    need = len(witnesses) if quorum is None else quorum
    try:
        cp, opened = open_checkpoint(receipt.note, trusted)
    except NoteError as exc:
        check.problems.append(f"the checkpoint is not signed by a trusted key ({exc})")
        return check
    check.size, check.origin = cp.size, cp.origin
    check.signed_by = [k.name for k in opened.verified]
    try:
        check.cosigned_by = cosigned_by(receipt.note, witnesses)
    except (NoteError, LedgerError) as exc:
        check.problems.append(f"a witness cosignature does not verify ({exc})")
    if len(check.cosigned_by) < need:
        check.problems.append(
            f"the checkpoint is cosigned by {len(check.cosigned_by)} of the {len(witnesses)} "
            f"trusted witnesses, fewer than the quorum {need}"
        )
    if receipt.extra is None:
        check.problems.append("the receipt carries no envelope (no 'extra' line)")
        return check
    _check_envelope(receipt, check)
    leaf = leaf_hash(receipt.extra)
    if not verify_inclusion(receipt.index, cp.size, leaf, receipt.path, cp.root):
        check.problems.append(
            f"the inclusion proof of index {receipt.index} does not lead to the root of the "
            f"checkpoint of size {cp.size}"
        )
    return check


def _check_envelope(receipt: Receipt, check: ReceiptCheck) -> None:
    assert receipt.extra is not None
    try:
        envelope = json.loads(receipt.extra)
    except (UnicodeDecodeError, ValueError):
        check.problems.append("the envelope (extra data) is not JSON")
        return
    if not isinstance(envelope, dict):
        check.problems.append("the envelope (extra data) is not a JSON object")
        return
    check.envelope = envelope
    check.kind = str(envelope.get("kind", ""))
    if envelope.get("seq") != receipt.index:
        check.problems.append(
            f"the envelope's seq {envelope.get('seq')!r} is not the receipt's index {receipt.index}"
        )


def checkpoint_of(receipt: Receipt) -> Checkpoint:
    """The checkpoint a receipt carries (not verified)."""
    return Checkpoint.from_text(parse_note(receipt.note).text)
