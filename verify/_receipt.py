"""Receipts (C2SP tlog-proof, ``docs/service.md`` §4), checked from the spec and the docs alone.

A receipt is, line by line (every line ends in U+000A)::

    c2sp.org/tlog-proof@v1
    extra <base64 of the event's envelope>           (the ledger's receipts always carry it)
    index <decimal, no leading zeroes>
    <base64 of one 32-byte hash>                     0 to 63 lines: the RFC 6962 audit path
    <empty line>
    <a signed checkpoint note>

It passes when every base64 field is canonical, the checkpoint is signed by a trusted log key,
a quorum of the trusted witnesses cosigned it, the envelope is a JSON object whose ``seq`` is
the index, and SHA-256(0x00 || envelope) is proven at the index under the checkpoint's root.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from verify._merkle import verify_inclusion
from verify._note import (
    NoteSignature,
    _b64decode_strict,
    open_checkpoint,
    parse_note,
    parse_vkey,
)
from verify._witness import CosignerKey, parse_cosigner_vkey

__all__ = ["ReceiptReport", "check_receipt"]

_HEADER = "c2sp.org/tlog-proof@v1"
_INDEX = re.compile(r"index (0|[1-9][0-9]*)")
_MAX_PATH = 63


@dataclass
class ReceiptReport:
    """What a receipt proves, or why it does not: ``passed`` is True only with no problems."""

    index: int = -1
    size: int = 0
    origin: str = ""
    kind: str = ""
    trial: str = ""
    cosigners: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every check held."""
        return not self.problems


def _split(text: str, report: ReceiptReport) -> tuple[bytes, list[bytes], str] | None:
    head, sep, note = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or lines[0] != _HEADER:
        report.problems.append(
            f"not a tlog-proof: the first line must be {_HEADER!r} and a "
            "blank line must come before the checkpoint"
        )
        return None
    if len(lines) < 3 or not lines[1].startswith("extra "):
        report.problems.append("line 2 is not 'extra <base64 envelope>'")
        return None
    match = _INDEX.fullmatch(lines[2])
    if match is None:
        report.problems.append("line 3 is not 'index <decimal>'")
        return None
    report.index = int(match.group(1))
    try:
        envelope = _b64decode_strict(lines[1][len("extra ") :])
        path = [_b64decode_strict(line) for line in lines[3:]]
    except (ValueError, UnicodeEncodeError):
        report.problems.append("a base64 field is malformed or not canonical")
        return None
    if any(len(h) != 32 for h in path) or len(path) > _MAX_PATH:
        report.problems.append(f"the audit path must be at most {_MAX_PATH} 32-byte hashes")
        return None
    return envelope, path, note


def _cosigned(
    report: ReceiptReport, key: CosignerKey, text: str, signatures: Sequence[NoteSignature]
) -> None:
    """Note the witness ``key`` as a cosigner if one of ``signatures`` is its valid one."""
    for sig in signatures:
        try:
            if key.verify(text, sig) is not None:
                report.cosigners.append(key.name)
                return
        except ValueError as exc:
            report.problems.append(f"cosignature of {key.name}: {exc}")
            return


def _read_envelope(report: ReceiptReport, envelope: bytes) -> None:
    """The receipt's kind and trial from its envelope, whose seq must be its index."""
    try:
        body = json.loads(envelope)
    except (UnicodeDecodeError, ValueError):
        body = None
    if not isinstance(body, dict):
        report.problems.append("the envelope is not a JSON object")
        return
    report.kind = str(body.get("kind", ""))
    inner = body.get("body")
    report.trial = str(inner.get("trial", "")) if isinstance(inner, dict) else ""
    if body.get("seq") != report.index:
        report.problems.append(f"the envelope's seq is not the index {report.index}")


def check_receipt(
    text: str | bytes,
    trusted_keys: Sequence[str],
    witnesses: Sequence[str] = (),
    quorum: int | None = None,
) -> ReceiptReport:
    """Check one receipt against trusted log vkeys and witness vkeys (quorum default: all).

    Never raises for a bad receipt: every failed check is a line of ``problems``.
    """
    report = ReceiptReport()
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            report.problems.append("the receipt is not UTF-8")
            return report
    parts = _split(text, report)
    if parts is None:
        return report
    envelope, path, note_text = parts
    try:
        note, checkpoint = open_checkpoint(note_text, [parse_vkey(k) for k in trusted_keys])
        _, signatures = parse_note(note_text)
    except Exception as exc:  # every note error of this package, each with its reason
        report.problems.append(f"the checkpoint does not verify: {exc}")
        return report
    report.size, report.origin = checkpoint.size, checkpoint.origin
    for vkey in witnesses:
        _cosigned(report, parse_cosigner_vkey(vkey), note.text, signatures)
    need = len(witnesses) if quorum is None else quorum
    if len(report.cosigners) < need:
        report.problems.append(
            f"cosigned by {len(report.cosigners)} trusted witness(es), fewer than the quorum {need}"
        )
    _read_envelope(report, envelope)
    leaf = hashlib.sha256(b"\x00" + envelope).digest()
    if not verify_inclusion(report.index, checkpoint.size, leaf, path, checkpoint.root):
        report.problems.append(
            f"the audit path does not prove the envelope at index {report.index} in the "
            f"checkpoint of size {checkpoint.size}"
        )
    return report
