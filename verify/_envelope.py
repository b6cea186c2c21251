"""Envelope rules of ``docs/ledger-format.md`` §1, as fast checks returning a reason or ``None``."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from verify._note import is_valid_key_name

__all__ = [
    "ENVELOPE_MEMBERS",
    "MAX_ENVELOPE_BYTES",
    "ZERO_PREV",
    "actor_problem",
    "envelope_problem",
    "is_hex64",
    "time_problem",
]

ENVELOPE_MEMBERS = frozenset({"v", "seq", "time", "kind", "actor", "prev", "body", "blobs"})
MAX_ENVELOPE_BYTES = 1_048_576
ZERO_PREV = "0" * 64

_TIME_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}Z"
)
_KIND = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX8 = re.compile(r"[0-9a-f]{8}")
_BLOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

_good_dates: set[str] = set()
_good_kinds: set[str] = set()
_good_actors: set[str] = set()


def is_hex64(value: object) -> bool:
    """Whether ``value`` is a string of 64 lowercase hex digits."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def time_problem(value: object) -> str | None:
    """Why ``value`` is not a ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` UTC time, or ``None`` if it is one."""
    if type(value) is str and _TIME.fullmatch(value) is not None:
        day = value[:10]
        if day in _good_dates:
            return None
        try:
            date.fromisoformat(day)
        except ValueError:
            return f"time {value!r} is not a valid calendar date and time"
        if len(_good_dates) < 4096:
            _good_dates.add(day)
        return None
    if isinstance(value, str) and _TIME_SHAPE.fullmatch(value) is not None:
        return f"time {value!r} is not a valid calendar date and time"
    return f"time {_show(value)} is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ"


def kind_problem(value: object) -> str | None:
    """Why ``value`` is not a valid event kind, or ``None``."""
    if isinstance(value, str) and value in _good_kinds:
        return None
    if not isinstance(value, str) or not 3 <= len(value) <= 64 or not _KIND.fullmatch(value):
        return (
            f"kind {_show(value)} is not 3-64 characters of the form "
            "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$"
        )
    if len(_good_kinds) < 4096:
        _good_kinds.add(value)
    return None


def actor_problem(value: object) -> str | None:
    """Why ``value`` is not an actor id ``<key name>+<8 lowercase hex key id>``, or ``None``."""
    if isinstance(value, str) and value in _good_actors:
        return None
    if isinstance(value, str):
        name, plus, key_id = value.rpartition("+")
        if plus and is_valid_key_name(name) and _HEX8.fullmatch(key_id):
            if len(_good_actors) < 4096:
                _good_actors.add(value)
            return None
    return f"actor {_show(value)} is not <key name>+<8 lowercase hex key id>"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def envelope_problem(env: Any, row_seq: int, *, prev_ok: bool = False) -> str | None:
    """Return the first way ``env`` (parsed envelope) breaks §1 for row ``row_seq``, or ``None``.

    ``prev_ok`` says the caller already found ``prev`` equal to a 64-hex leaf hash.
    """
    if type(env) is not dict:
        return "envelope is not a JSON object"
    if len(env) != 8 or env.keys() != ENVELOPE_MEMBERS:
        return _members_problem(env)
    v = env["v"]
    if type(v) is not int or v != 1:
        return f"v is {_show(v)}; this verifier knows only format version 1"
    seq = env["seq"]
    if type(seq) is not int or seq != row_seq:
        return f"envelope seq {_show(seq)} differs from its row's seq {row_seq}"
    problem = time_problem(env["time"]) or kind_problem(env["kind"]) or actor_problem(env["actor"])
    if problem:
        return problem
    if not prev_ok and not is_hex64(env["prev"]):
        return f"prev {_show(env['prev'])} is not 64 lowercase hex digits"
    if type(env["body"]) is not dict:
        return "body is not a JSON object"
    return _blobs_problem(env["blobs"])


def _members_problem(env: dict[str, Any]) -> str:
    """The first member an envelope without exactly the §1 members lacks, or else has extra."""
    missing = sorted(ENVELOPE_MEMBERS - env.keys())
    extra = sorted(env.keys() - ENVELOPE_MEMBERS)
    if missing:
        return f"envelope lacks member {missing[0]!r}"
    return f"envelope has unknown member {extra[0]!r}"


def _blobs_problem(blobs: Any) -> str | None:
    """The first way an envelope's ``blobs`` is not an object of names to SHA-256 addresses."""
    if type(blobs) is not dict:
        return "blobs is not a JSON object"
    for name, digest in blobs.items():
        if not _BLOB_NAME.fullmatch(name):
            return f"blob name {_show(name)} does not match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$"
        if not is_hex64(digest):
            return f"blob {name!r}: {_show(digest)} is not a 64 lowercase hex SHA-256"
    return None
