"""``ledger monitor``: follow a log published as C2SP tlog-tiles over HTTP (``docs/service.md``).

Each check fetches ``<url>/checkpoint`` and, in this order:

1. verifies its signature by a trusted log key and that it names the log seen before;
2. compares it with the last checkpoint this monitor verified (its state file): a smaller size
   is a **rollback**, the same size with another root a **fork**;
3. fetches the tiles it needs for the new size and re-derives the tree: every full tile must
   hash to its entry one level up, and the right-edge tiles must fold to the checkpoint's root,
   else a **tile disagrees with the checkpoint**;
4. extends the tree it verified last time (its compact range, kept in the state) with the new
   leaf hashes: the result must be the new root, else the new checkpoint does not extend the
   old one (a **fork**);
5. checks every published entry bundle of the new range against the level-0 tiles and the hash
   chain (``seq`` and ``prev`` of each envelope);
6. counts the cosignatures of the trusted witnesses: fewer than the quorum is an
   **unwitnessed checkpoint**;

and only then writes the new state (atomically). A failed check leaves the state as it was.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger._errors import LedgerError, NoteError
from ledger._keys import VerifierKey
from ledger._merkle import EMPTY_ROOT, fold, node_hash, root_from_leaf_hashes
from ledger._note import Checkpoint, open_checkpoint
from ledger._receipt import cosigned_by
from ledger._tiles import (
    ENTRIES,
    HASH_SIZE,
    MAX_ENTRY,
    TILE_WIDTH,
    TileError,
    TileRef,
    decode_bundle,
)

__all__ = [
    "STATE_VERSION",
    "FetchError",
    "ForkError",
    "MonitorError",
    "MonitorReport",
    "MonitorState",
    "RollbackError",
    "TileMismatchError",
    "UnwitnessedError",
    "check_log",
    "http_fetcher",
]

STATE_VERSION = 1
MAX_CHECKPOINT = 64 * 1024

Fetch = Callable[[str], bytes | None]
"""Fetch a path under the log's prefix: its bytes, or None when it is not there (HTTP 404)."""


class MonitorError(LedgerError):
    """The published log failed a check (or could not be checked)."""


class FetchError(MonitorError):
    """A resource of the published log could not be fetched."""


class ForkError(MonitorError):
    """Two checkpoints signed by the log that cannot both be true."""


class RollbackError(MonitorError):
    """The log now publishes a smaller tree than it published before."""


class TileMismatchError(MonitorError):
    """A tile or entry bundle that does not agree with the checkpoint."""


class UnwitnessedError(MonitorError):
    """A checkpoint without the cosignatures of the trusted witnesses' quorum."""


@dataclass
class MonitorState:
    """What the monitor verified last: the checkpoint and the tree's compact range."""

    url: str
    origin: str
    note: str
    size: int
    root: bytes
    frontier: list[tuple[int, bytes]]  # complete subtrees of [0, size), largest first

    def to_json(self) -> dict[str, Any]:
        """The state file's JSON (``version`` first)."""
        return {
            "version": STATE_VERSION,
            "url": self.url,
            "origin": self.origin,
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "frontier": [[h, base64.b64encode(x).decode()] for h, x in self.frontier],
            "checkpoint": self.note,
        }

    @classmethod
    def load(cls, path: Path) -> MonitorState | None:
        """Read a state file (None when it does not exist); refuse an unknown version."""
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise MonitorError(f"state file {path}: unreadable ({exc})") from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise MonitorError(f"state file {path}: not a version {STATE_VERSION} monitor state")
        try:
            return cls(
                str(data["url"]),
                str(data["origin"]),
                str(data["checkpoint"]),
                int(data["size"]),
                base64.b64decode(data["root"]),
                [(int(h), base64.b64decode(x)) for h, x in data["frontier"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MonitorError(f"state file {path}: malformed ({exc})") from exc

    def save(self, path: Path) -> None:
        """Write the state atomically (a temporary file, fsynced, renamed over ``path``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".monitor-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.to_json(), handle, indent=1)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


@dataclass
class MonitorReport:
    """What one check saw."""

    origin: str
    old_size: int
    size: int
    tiles_fetched: int = 0
    entries_checked: int = 0
    bundles_withheld: int = 0
    cosigned_by: list[str] = field(default_factory=list)
    witnesses_checked: bool = False


def http_fetcher(url: str, timeout: float = 30.0) -> tuple[Fetch, Callable[[], None]]:
    """A :data:`Fetch` over HTTP(S) for the log at ``url`` and a function that closes it."""
    import httpx

    base = url.rstrip("/")
    client = httpx.Client(timeout=timeout, follow_redirects=False)

    def fetch(path: str) -> bytes | None:
        try:
            response = client.get(f"{base}/{path}")
        except httpx.HTTPError as exc:
            raise FetchError(f"{base}/{path}: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise FetchError(f"{base}/{path}: HTTP {response.status_code}")
        return response.content

    return fetch, client.close


def _describe(note: str) -> str:
    cp = Checkpoint.from_text(note.partition("\n\n")[0] + "\n")
    root = base64.b64encode(cp.root).decode()
    return f"size {cp.size} root {root}:\n" + "".join(
        "    " + line + "\n" for line in note.splitlines()
    )


def _decompose(size: int) -> list[tuple[int, int]]:
    """The complete subtrees of ``[0, size)``, largest first, as (height, index at that height)."""
    out: list[tuple[int, int]] = []
    pos = 0
    for height in range(size.bit_length() - 1, -1, -1):
        if size & (1 << height):
            out.append((height, pos >> height))
            pos += 1 << height
    return out


class _Tiles:
    """The hash tiles of one tree size, fetched on demand, each checked for its length."""

    def __init__(self, fetch: Fetch, size: int) -> None:
        self.fetch = fetch
        self.size = size
        self.cache: dict[tuple[int, int], bytes] = {}
        self.fetched = 0

    def width(self, level: int, index: int) -> int:
        count: int = self.size // TILE_WIDTH**level  # hashes at this level
        return min(TILE_WIDTH, count - index * TILE_WIDTH)

    def tile(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self.cache:
            ref = TileRef(level, index, self.width(level, index))
            data = self.fetch(ref.path)
            self.fetched += 1
            if data is None:
                raise TileMismatchError(
                    f"tile {ref.path} is missing, but the checkpoint of size {self.size} needs it"
                )
            if len(data) != ref.width * HASH_SIZE:
                raise TileMismatchError(
                    f"tile {ref.path} is {len(data)} bytes, expected {ref.width * HASH_SIZE}"
                )
            self.cache[key] = data
        return self.cache[key]

    def hash(self, level: int, position: int) -> bytes:
        """The hash at ``position`` of tile level ``level``."""
        data = self.tile(level, position // TILE_WIDTH)
        offset = (position % TILE_WIDTH) * HASH_SIZE
        return data[offset : offset + HASH_SIZE]

    def subtree(self, height: int, index: int) -> bytes:
        """The hash of the complete subtree (height, index), from the tile at height // 8."""
        level, rest = divmod(height, 8)
        first = index << rest
        return root_from_leaf_hashes([self.hash(level, first + i) for i in range(1 << rest)])


def _check_tiles(tiles: _Tiles, cp: Checkpoint, start: int) -> None:
    """Check every tile covering ``[start, size)`` hashes up to the checkpoint's root."""
    size = cp.size
    level = 0
    while size // TILE_WIDTH**level:
        count: int = size // TILE_WIDTH**level
        first_tile = (start // TILE_WIDTH**level) // TILE_WIDTH
        for index in range(first_tile, (count + TILE_WIDTH - 1) // TILE_WIDTH):
            data = tiles.tile(level, index)
            if len(data) == TILE_WIDTH * HASH_SIZE:  # full: it hashes to its entry above
                hashes = [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]
                if root_from_leaf_hashes(hashes) != tiles.hash(level + 1, index):
                    ref = TileRef(level, index)
                    up = TileRef(
                        level + 1, index // TILE_WIDTH, tiles.width(level + 1, index // TILE_WIDTH)
                    )
                    raise TileMismatchError(
                        f"tile {ref.path} does not hash to its entry {index % TILE_WIDTH} in "
                        f"tile {up.path} (checkpoint of size {size})"
                    )
        level += 1
    root = fold([tiles.subtree(h, i) for h, i in _decompose(size)]) if size else EMPTY_ROOT
    if root != cp.root:
        raise TileMismatchError(
            f"the published tiles give root {base64.b64encode(root).decode()} for size {size}, "
            f"but the checkpoint says {base64.b64encode(cp.root).decode()}"
        )


def _extend(frontier: list[tuple[int, bytes]], leaves: Sequence[bytes]) -> list[tuple[int, bytes]]:
    """Append leaf hashes to a compact range (complete subtrees, largest first)."""
    stack = list(frontier)
    for leaf in leaves:
        height, cur = 0, leaf
        while stack and stack[-1][0] == height:
            cur = node_hash(stack.pop()[1], cur)
            height += 1
        stack.append((height, cur))
    return stack


def _root(frontier: list[tuple[int, bytes]]) -> bytes:
    return fold([h for _, h in frontier]) if frontier else EMPTY_ROOT


def _check_bundles(
    fetch: Fetch, tiles: _Tiles, start: int, size: int, report: MonitorReport
) -> None:
    """Check each published entry bundle of ``[start, size)``: hashes, ``seq``, ``prev``."""
    for index in range(start // TILE_WIDTH, (size + TILE_WIDTH - 1) // TILE_WIDTH):
        ref = TileRef(ENTRIES, index, tiles.width(0, index))
        data = fetch(ref.path)
        if data is None:
            report.bundles_withheld += 1
            continue
        if len(data) > ref.width * (MAX_ENTRY + 2):
            raise TileMismatchError(f"entry bundle {ref.path} is larger than {ref.width} entries")
        try:
            entries = decode_bundle(data, f"entry bundle {ref.path}")
        except TileError as exc:
            raise TileMismatchError(str(exc)) from exc
        if len(entries) != ref.width:
            raise TileMismatchError(
                f"entry bundle {ref.path} holds {len(entries)} entries, expected {ref.width}"
            )
        for offset, entry in enumerate(entries):
            seq = index * TILE_WIDTH + offset
            leaf = tiles.hash(0, seq)
            if hashlib.sha256(b"\x00" + entry).digest() != leaf:
                raise TileMismatchError(
                    f"entry {seq} of bundle {ref.path} does not hash to its leaf in the tile"
                )
            try:
                envelope = json.loads(entry)
            except ValueError as exc:
                raise TileMismatchError(f"entry {seq} of {ref.path} is not JSON") from exc
            prev = "0" * 64 if seq == 0 else tiles.hash(0, seq - 1).hex()
            if not isinstance(envelope, dict) or envelope.get("seq") != seq:
                raise TileMismatchError(f"entry {seq} of {ref.path}: its seq is not {seq}")
            if envelope.get("prev") != prev:
                raise TileMismatchError(
                    f"entry {seq} of {ref.path}: prev is not the leaf hash of entry {seq - 1}"
                )
            report.entries_checked += 1


def check_log(
    fetch: Fetch,
    url: str,
    trusted: Sequence[VerifierKey],
    state: MonitorState | None,
    *,
    witnesses: Sequence[str] = (),
    quorum: int | None = None,
) -> tuple[MonitorState, MonitorReport]:
    """Check the log's current checkpoint against ``state``; return the new state and a report.

    Raises a :class:`MonitorError` subclass naming what failed (and, for a fork or a rollback,
    both checkpoints). ``witnesses`` are cosigner vkeys; ``quorum`` defaults to all of them.
    """
    raw = fetch("checkpoint")
    if raw is None:
        raise FetchError(f"{url}: no checkpoint published")
    if len(raw) > MAX_CHECKPOINT:
        raise FetchError(f"{url}/checkpoint: larger than {MAX_CHECKPOINT} bytes")
    try:
        note = raw.decode("utf-8")
        cp, _ = open_checkpoint(note, trusted)
    except (UnicodeDecodeError, NoteError) as exc:
        raise MonitorError(
            f"{url}/checkpoint is not a checkpoint signed by a trusted key: {exc}"
        ) from exc
    old_size = 0 if state is None else state.size
    report = MonitorReport(cp.origin, old_size, cp.size)
    if state is not None:
        if cp.origin != state.origin:
            raise ForkError(f"{url}/checkpoint names origin {cp.origin!r}, not {state.origin!r}")
        if cp.size < state.size:
            raise RollbackError(
                f"ROLLBACK: {url} now publishes a smaller tree than it did before.\n"
                f"  seen before: {_describe(state.note)}  now:         {_describe(note)}"
            )
        if cp.size == state.size and cp.root != state.root:
            raise ForkError(
                f"FORK: two checkpoints of {cp.origin}, both signed by the log, have size "
                f"{cp.size} and different roots.\n"
                f"  seen before: {_describe(state.note)}  now:         {_describe(note)}"
            )
    frontier = [] if state is None else state.frontier
    start = old_size
    tiles = _Tiles(fetch, cp.size)
    if cp.size > start:
        _check_tiles(tiles, cp, start)
        leaves = [tiles.hash(0, i) for i in range(start, cp.size)]
        frontier = _extend(frontier, leaves)
        if _root(frontier) != cp.root:
            assert state is not None  # from size 0 the extension is the tiles' own tree
            raise ForkError(
                f"FORK: the checkpoint of size {cp.size} does not extend the checkpoint of size "
                f"{state.size} seen before (its tiles are consistent with it, but their first "
                f"{state.size} leaves are another history).\n"
                f"  seen before: {_describe(state.note)}  now:         {_describe(note)}"
            )
        _check_bundles(fetch, tiles, start, cp.size, report)
    report.tiles_fetched = tiles.fetched
    if witnesses:
        report.witnesses_checked = True
        need = len(witnesses) if quorum is None else quorum
        try:
            report.cosigned_by = cosigned_by(note, witnesses)
        except (NoteError, LedgerError) as exc:
            raise UnwitnessedError(
                f"{url}/checkpoint: a cosignature does not verify ({exc})"
            ) from exc
        if len(report.cosigned_by) < need:
            raise UnwitnessedError(
                f"UNWITNESSED: the checkpoint of size {cp.size} carries valid cosignatures of "
                f"{len(report.cosigned_by)} of the {len(witnesses)} trusted witnesses "
                f"({', '.join(report.cosigned_by) or 'none'}), fewer than the quorum {need}:\n"
                f"  {_describe(note)}"
            )
    new = MonitorState(url, cp.origin, note, cp.size, cp.root, frontier)
    return new, report
