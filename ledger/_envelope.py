"""Envelope v1: building, canonical bytes, parsing and validation (docs/ledger-format.md §1)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger._canonical import MAX_SAFE_INTEGER, canonical_json, loads_json
from ledger._errors import CanonicalError, FormatError

_string = json.encoder.encode_basestring  # a JSON string as the C encoder writes it

VERSION = 1
MAX_ENVELOPE_BYTES = 1_048_576
ZERO_HASH = "0" * 64
FIELDS = frozenset({"v", "seq", "time", "kind", "actor", "prev", "body", "blobs"})

# ``\Z``, not ``$``: ``$`` also matches before a final newline, so ``"...Z\n"`` would pass as a
# time (and the verifier, which matches whole strings, would refuse what the service stored).
# ``\d`` is ASCII only (re.ASCII): other scripts' digits are no envelope's.
KIND_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+\Z")
TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z", re.ASCII)
HEX64_RE = re.compile(r"^[0-9a-f]{64}\Z")
BLOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
ACTOR_RE = re.compile(r"^[^\s+]{1,128}\+[0-9a-f]{8}\Z")


def format_time(moment: datetime) -> str:
    """Format an aware datetime as the envelope's UTC time with microseconds."""
    if moment.tzinfo is not UTC:  # the clocks give UTC already: no conversion to pay for
        if moment.tzinfo is None:
            raise FormatError("time must be timezone-aware (UTC)")
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


def check_kind(kind: str) -> str:
    """Return ``kind`` if it is a valid event kind, else raise :class:`FormatError`."""
    if not isinstance(kind, str) or not 3 <= len(kind) <= 64 or not KIND_RE.match(kind):
        raise FormatError(
            f"kind {kind!r} is invalid: use dotted lowercase words such as 'trial.responded'"
        )
    return kind


def check_time(value: Any) -> str:
    """Return ``value`` if it is a valid envelope time string."""
    if not isinstance(value, str) or not TIME_RE.match(value):
        raise FormatError(f"time {value!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    try:
        datetime.fromisoformat(value[:-1])
    except ValueError as exc:
        raise FormatError(f"time {value!r} is not a valid date and time") from exc
    return value


@dataclass(frozen=True)
class Envelope:
    """One ledger event, as signed. ``data`` is its canonical byte form."""

    seq: int
    time: str
    kind: str
    actor: str
    prev: str
    body: Mapping[str, Any]
    blobs: Mapping[str, str]
    data: bytes

    def as_dict(self) -> dict[str, Any]:
        """Return the envelope as a plain JSON object."""
        return {
            "v": VERSION,
            "seq": self.seq,
            "time": self.time,
            "kind": self.kind,
            "actor": self.actor,
            "prev": self.prev,
            "body": self.body,
            "blobs": self.blobs,
        }


def build_envelope(
    *,
    seq: int,
    time: str,
    kind: str,
    actor: str,
    prev: str,
    body: Mapping[str, Any],
    blobs: Mapping[str, str],
    prevalidated: bool = False,
) -> Envelope:
    """Validate the parts of an envelope and return it with its canonical bytes.

    ``prevalidated=True`` skips the member checks for callers that built every member themselves
    from checked parts (the store does: its own clock, hashes and keys, and a checked kind and
    blob names); the body is still checked and canonicalised.
    """
    obj = {
        "v": VERSION,
        "seq": seq,
        "time": time,
        "kind": kind,
        "actor": actor,
        "prev": prev,
        "body": body,
        "blobs": blobs,
    }
    if not prevalidated:
        _validate(obj)
    elif not isinstance(body, Mapping):
        raise FormatError("body must be a JSON object")
    if prevalidated and type(seq) is int and 0 <= seq <= MAX_SAFE_INTEGER:
        data = envelope_bytes(
            seq=seq, time=time, kind=kind, actor=actor, prev=prev, body=body, blobs=blobs
        )
    else:
        try:
            data = canonical_json(obj)  # one scan picks the fast path (floats) or the reference
        except CanonicalError as exc:
            raise CanonicalError(f"{kind} body: {exc}") from exc
        _check_size(kind, data)
    return Envelope(seq, time, kind, actor, prev, body, blobs, data)


def _check_size(kind: str, data: bytes) -> None:
    if len(data) > MAX_ENVELOPE_BYTES:
        raise FormatError(
            f"{kind} envelope is {len(data)} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit; "
            "move large content into a blob"
        )


def envelope_bytes(
    *,
    seq: int,
    time: str,
    kind: str,
    actor: str,
    prev: str,
    body: Mapping[str, Any],
    blobs: Mapping[str, str],
) -> bytes:
    """The canonical bytes of an envelope whose members the caller built from checked parts.

    For the store (its own clock, hashes and keys, a checked kind; ``seq`` a safe integer):
    RFC 8785 writes an object as its members in the order of their (here ASCII) keys, each
    value canonical, so the fixed members around the body's and the blobs' own canonical forms
    are exactly ``canonical_json`` of the whole envelope (``tests/ledger/test_canonical.py``), for
    less than half the cost. The body is still checked (a :class:`CanonicalError` names the
    kind) and the size limit applies.
    """
    data = _assemble(seq, time, kind, actor, prev, body, blobs)
    _check_size(kind, data)
    return data


def _assemble(
    seq: int,
    time: str,
    kind: str,
    actor: str,
    prev: str,
    body: Mapping[str, Any],
    blobs: Mapping[str, str],
) -> bytes:
    """:func:`envelope_bytes` without the size limit (:func:`parse_envelope` checks it first)."""
    try:
        data = b"".join(
            (
                b'{"actor":',
                _string(actor).encode("utf-8"),
                b',"blobs":',
                _blob_refs(blobs),
                b',"body":',
                canonical_json(body),
                b',"kind":',
                _string(kind).encode("utf-8"),
                b',"prev":',
                _string(prev).encode("utf-8"),
                b',"seq":',
                str(seq).encode("ascii"),
                b',"time":',
                _string(time).encode("utf-8"),
                b',"v":',
                str(VERSION).encode("ascii"),
                b"}",
            )
        )
    except UnicodeEncodeError:  # a lone surrogate in a member: the reference way names it
        obj = {
            "v": VERSION,
            "seq": seq,
            "time": time,
            "kind": kind,
            "actor": actor,
            "prev": prev,
            "body": body,
            "blobs": blobs,
        }
        try:
            data = canonical_json(obj)
        except CanonicalError as exc:
            raise CanonicalError(f"{kind} body: {exc}") from exc
    except CanonicalError as exc:
        raise CanonicalError(f"{kind} body: {exc}") from exc
    return data


_BLOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _blob_refs(blobs: Mapping[str, str]) -> bytes:
    """The canonical form of an envelope's ``blobs`` (most events have none: ``{}``).

    Names and digests that are whole blob names and hex SHA-256s (ASCII with nothing to escape:
    ``fullmatch``, so no trailing newline) are joined here in key order; anything else goes
    through :func:`canonical_json`.
    """
    if not blobs:
        return b"{}"
    if type(blobs) is dict and all(
        type(k) is str and type(v) is str and _BLOB_NAME.fullmatch(k) and _HEX64.fullmatch(v)
        for k, v in blobs.items()
    ):
        return ("{" + ",".join(f'"{k}":"{blobs[k]}"' for k in sorted(blobs)) + "}").encode()
    return canonical_json(blobs)


def _validate(obj: Mapping[str, Any]) -> None:
    if set(obj) != FIELDS:
        missing = sorted(FIELDS - set(obj))
        extra = sorted(set(obj) - FIELDS)
        raise FormatError(f"envelope members wrong (missing {missing}, unexpected {extra})")
    v = obj["v"]
    if type(v) is not int or v != VERSION:
        raise FormatError(f"unknown envelope version {v!r}; this reader understands v={VERSION}")
    seq = obj["seq"]
    if type(seq) is not int or not 0 <= seq <= MAX_SAFE_INTEGER:
        raise FormatError(f"seq {seq!r} is not a non-negative integer")
    check_time(obj["time"])
    check_kind(obj["kind"])
    actor = obj["actor"]
    if not isinstance(actor, str) or not ACTOR_RE.match(actor):
        raise FormatError(f"actor {actor!r} is not <key name>+<8 hex key id>")
    prev = obj["prev"]
    if not isinstance(prev, str) or not HEX64_RE.match(prev):
        raise FormatError(f"prev {prev!r} is not 64 lowercase hex characters")
    body = obj["body"]  # a dict when parsed: the ABC check only for other callers' mappings
    if type(body) is not dict and not isinstance(body, Mapping):
        raise FormatError("body must be a JSON object")
    blobs = obj["blobs"]
    if type(blobs) is not dict and not isinstance(blobs, Mapping):
        raise FormatError("blobs must be a JSON object")
    for name, digest in blobs.items():
        if not isinstance(name, str) or not BLOB_NAME_RE.match(name):
            raise FormatError(f"blob name {name!r} is invalid (letters, digits, '.', '_', '-')")
        if not isinstance(digest, str) or not HEX64_RE.match(digest):
            raise FormatError(f"blob {name!r}: {digest!r} is not a lowercase hex SHA-256")


def parse_envelope(data: bytes) -> Envelope:
    """Parse and fully validate canonical envelope bytes.

    Raises :class:`FormatError` when the bytes are not JSON, not canonical, or break a field rule.
    """
    if len(data) > MAX_ENVELOPE_BYTES:
        raise FormatError(f"envelope is {len(data)} bytes, over the limit")
    try:
        obj = loads_json(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"envelope is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise FormatError("envelope is not a JSON object")
    _validate(obj)
    # Every member but the body and the blobs is a string or an integer _validate checked, so
    # the fixed members joined around the body's and the blobs' canonical forms are exactly
    # canonical_json of the whole envelope (as envelope_bytes writes it); the body is still
    # canonicalised in full. The bytes are canonical only if they are that, byte for byte.
    if (
        _assemble(
            obj["seq"],
            obj["time"],
            obj["kind"],
            obj["actor"],
            obj["prev"],
            obj["body"],
            obj["blobs"],
        )
        != data
    ):
        raise FormatError("envelope bytes are not RFC 8785 canonical")
    return Envelope(
        obj["seq"],
        obj["time"],
        obj["kind"],
        obj["actor"],
        obj["prev"],
        obj["body"],
        obj["blobs"],
        data,
    )
