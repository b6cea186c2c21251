"""The one strict parse of ``ledger/events.jsonl`` (``docs/archive-format.md`` §4.1).

Each line is read with a length limit and parsed once, by the RFC 8785 parser of
:mod:`verify._canonical` (NaN, Infinity, lone surrogates, invalid UTF-8 and nesting beyond the
parser's depth are refused there). The ledger-level checks consume every line; the archive and
science checks see only :attr:`EventLine.shared`: the envelope of a line that parsed and whose
envelope has the shape ``docs/ledger-format.md`` §1 requires (members, version, time, kind,
actor, a body object, blob addresses of 64 lowercase hex) and nests at most
:data:`MAX_NESTING` levels. No check parses a line a second time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from verify._canonical import CanonicalError, Canonicalizer, canonical_json
from verify._envelope import MAX_ENVELOPE_BYTES, envelope_problem
from verify._reader.files import ArchiveFiles
from verify._reader.names import EVENTS, line_where
from verify._safeio import human_bytes

__all__ = [
    "MAX_EVENT_LINES",
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "EventLine",
    "EventReader",
    "nesting_exceeds",
]

MAX_LINE_BYTES = MAX_ENVELOPE_BYTES + 1024
"""A line holds one envelope (at most 1 MiB) and its signature; longer lines are not parsed."""
MAX_NESTING = 64
"""Arrays and objects an envelope may nest (the writer's deepest is 6)."""
MAX_EVENT_LINES = 4_000_000
"""Lines of ``ledger/events.jsonl`` read (a 100,000-trial study has about 350,000)."""

_ENVELOPE_PREFIX = b'{"envelope":'
_SIGNATURE_SEP = b',"signature":"'


def nesting_exceeds(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if type(c) is dict or type(c) is list)
    return False


@dataclass
class EventLine:
    """One line of ``ledger/events.jsonl`` as parsed once.

    ``env`` is the ``envelope`` member when it is an object (what the ledger-level checks
    examine), ``shared`` the same object only when it passes the shape rules (what every
    other check reads), ``envelope`` the bytes that were signed (``canonical`` says they are
    the RFC 8785 form of ``env``, so nothing need parse them again), ``problems`` the
    ``envelopes`` FAIL reasons of this line.
    """

    index: int
    envelope: bytes
    signature: bytes | None = None
    env: dict[str, Any] | None = None
    shared: dict[str, Any] | None = None
    canonical: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def leaf_hash(self) -> bytes:
        """SHA-256(0x00 || envelope bytes)."""
        return hashlib.sha256(b"\x00" + self.envelope).digest()


class EventReader:
    """Reads ``ledger/events.jsonl`` through :class:`ArchiveFiles`, one line at a time.

    Iterating yields an :class:`EventLine` per line; afterwards ``lines`` is the number of
    lines, ``tail_problem`` says when the last line lacks its newline and ``cut_problem`` when
    reading stopped at :data:`MAX_EVENT_LINES`. Raises
    :class:`~verify._reader.files.ArchiveFileError` when the file cannot be opened.

    Once ``skim`` is set (by a consumer that has seen enough faulty lines), each further line
    is yielded unparsed: ``envelope`` is the bytes between ``{"envelope":`` and the last
    ``,"signature":"`` (what a canonical line signs), or the whole line, and ``env`` is ``None``.
    """

    def __init__(self, files: ArchiveFiles) -> None:
        self.files = files
        self.skim = False
        self.lines = 0
        self.tail_problem: str | None = None
        self.cut_problem: str | None = None

    def __iter__(self) -> Iterator[EventLine]:
        parse = Canonicalizer(shared=True).parse  # every line's envelope is kept
        with self.files.open(EVENTS) as fh:
            index = 0
            while True:
                raw = fh.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                if index >= MAX_EVENT_LINES:
                    self.cut_problem = (
                        f"{EVENTS} has more than {MAX_EVENT_LINES:,} lines, the most this "
                        "verifier reads: the rest was not read"
                    )
                    break
                oversize = False
                if raw.endswith(b"\n"):
                    line = raw[:-1]
                elif len(raw) > MAX_LINE_BYTES:
                    oversize = True
                    line = raw[:MAX_LINE_BYTES]
                    while True:  # skip the rest of the line without holding it
                        rest = fh.readline(1 << 20)
                        if not rest or rest.endswith(b"\n"):
                            break
                else:
                    line = raw
                    where = line_where(index)
                    self.tail_problem = f"{where}: the last line does not end in a newline"
                self.lines = index + 1
                if oversize:
                    where = line_where(index)
                    yield EventLine(
                        index,
                        line,
                        problems=[
                            f"{where}: the line is longer than {human_bytes(MAX_LINE_BYTES)} "
                            f"(an envelope is at most {human_bytes(MAX_ENVELOPE_BYTES)}): "
                            "not parsed"
                        ],
                    )
                elif self.skim:
                    cut = line.rfind(_SIGNATURE_SEP)
                    if cut > 0 and line.startswith(_ENVELOPE_PREFIX):
                        line = line[len(_ENVELOPE_PREFIX) : cut]
                    yield EventLine(index, line)
                else:
                    yield _parse_line(parse, index, line)
                index += 1


def _signature_bytes(sig_text: Any) -> bytes | None:
    """A line's signature: standard padded base64 decoded, or None if it is not that."""
    if type(sig_text) is not str:
        return None
    try:
        raw = base64.b64decode(sig_text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == sig_text else None


def _parse_line(parse: Any, index: int, line: bytes) -> EventLine:
    where = line_where(index)
    out = EventLine(index, line)
    try:
        obj, canonical = parse(line)
    except CanonicalError as exc:
        out.problems.append(f"{where}: not valid JSON for JCS: {exc}")
        return out
    if type(obj) is not dict or set(obj) != {"envelope", "signature"}:
        out.problems.append(
            f"{where}: a line must be an object with exactly the members 'envelope' and 'signature'"
        )
    env: Any = None
    if type(obj) is dict:
        env = obj.get("envelope")
        sig = _signature_bytes(obj.get("signature"))
        if sig is not None:
            out.signature = sig
    if canonical != line:
        out.problems.append(
            f"{where} (seq {index}): the line is not the RFC 8785 canonical JSON of its "
            "content (whitespace, member order, escaping or number form changed)"
        )
    if type(env) is not dict:
        return out
    out.env = env
    if canonical == line and line.startswith(_ENVELOPE_PREFIX):
        out.envelope = line[len(_ENVELOPE_PREFIX) : line.rindex(_SIGNATURE_SEP)]
        out.canonical = True
    else:
        with contextlib.suppress(CanonicalError):
            out.envelope = canonical_json(env)
            out.canonical = True
    seq = env.get("seq")
    # the envelope cannot nest deeper than the line has brackets (counted in C): most lines
    # need no walk
    if line.count(b"{") + line.count(b"[") > MAX_NESTING and nesting_exceeds(env):
        out.problems.append(
            f"{where}: the envelope nests arrays and objects deeper than {MAX_NESTING} levels"
        )
    elif envelope_problem(env, seq if type(seq) is int else index, prev_ok=True) is None:
        out.shared = env
    return out
