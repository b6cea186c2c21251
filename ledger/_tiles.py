"""C2SP tlog-tiles: the log published as immutable static files (``docs/service.md``).

Layout of a published log's directory (``c2sp.org/tlog-tiles``)::

    checkpoint                      the latest published checkpoint (mutable, replaced atomically)
    tile/<L>/<N>[.p/<W>]            hash tiles: 256 hashes (8,192 bytes) or a partial W < 256
    tile/entries/<N>[.p/<W>]        entry bundles: each entry a big-endian uint16 length + bytes
    blob/<sha256 hex>               the blobs the published entries reference

``<N>`` is written in zero-padded 3-digit path elements, all but the last prefixed with ``x``
(1234067 is ``x001/x234/067``). An entry is an envelope's canonical bytes, so each entry hashes
(RFC 6962: SHA-256(0x00 || entry)) to the leaf hash in the level-0 tile at its index. Tiles,
bundles and blobs are written once (a temporary file, fsynced, then hard-linked into place, which
fails rather than replace), and a file already there must hold the same bytes: the writer refuses
to publish a log whose history differs from what the directory already holds.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger._errors import LedgerError
from ledger._merkle import root_from_leaf_hashes

__all__ = [
    "HASH_SIZE",
    "MAX_ENTRY",
    "TILE_WIDTH",
    "PublishResult",
    "TileError",
    "TileRef",
    "decode_bundle",
    "encode_bundle",
    "encode_index",
    "parse_tile_path",
    "publish",
    "tile_path",
    "tiles_for",
    "write_once",
]

TILE_WIDTH = 256
HASH_SIZE = 32
MAX_ENTRY = 0xFFFF
MAX_LEVEL = 63
ENTRIES = -1
"""The ``level`` of an entry bundle in a :class:`TileRef`."""

_TILE_RE = re.compile(
    r"tile/(entries|0|[1-9][0-9]?)/((?:x[0-9]{3}/)*)([0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?"
)


class TileError(LedgerError):
    """A tile path, tile or entry bundle that is malformed, or a published file that conflicts."""


def encode_index(index: int) -> str:
    """The tlog-tiles path form of a tile index: ``1234067`` -> ``x001/x234/067``."""
    if index < 0:
        raise TileError(f"tile index {index} is negative")
    groups = [index % 1000]
    index //= 1000
    while index:
        groups.append(index % 1000)
        index //= 1000
    groups.reverse()
    return "/".join(("x" if i < len(groups) - 1 else "") + f"{g:03d}" for i, g in enumerate(groups))


@dataclass(frozen=True)
class TileRef:
    """One tile: its level (``ENTRIES`` for an entry bundle), index and width (256 when full)."""

    level: int
    index: int
    width: int = TILE_WIDTH

    @property
    def path(self) -> str:
        """The tile's path under the log's prefix."""
        return tile_path(self.level, self.index, self.width)


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """``tile/<L>/<N>[.p/<W>]`` (``level`` ``ENTRIES``: ``tile/entries/<N>[.p/<W>]``)."""
    if not 0 < width <= TILE_WIDTH:
        raise TileError(f"tile width {width} is outside 1..{TILE_WIDTH}")
    if level != ENTRIES and not 0 <= level <= MAX_LEVEL:
        raise TileError(f"tile level {level} is outside 0..{MAX_LEVEL}")
    name = "entries" if level == ENTRIES else str(level)
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{name}/{encode_index(index)}{suffix}"


def parse_tile_path(path: str) -> TileRef:
    """Parse a tile or entry bundle path; raise :class:`TileError` unless it is canonical.

    Canonical means what :func:`tile_path` writes: a level 0..63 or ``entries`` with no leading
    zeroes, an index without a leading all-zero ``x000`` element, a width 1..255.
    """
    match = _TILE_RE.fullmatch(path)
    if match is None:
        raise TileError(f"{path!r} is not a tile path (tile/<L>/<N>[.p/<W>])")
    name, xs, last, width_s = match.groups()
    level = ENTRIES if name == "entries" else int(name)
    if level > MAX_LEVEL:
        raise TileError(f"{path!r}: tile level {level} is outside 0..{MAX_LEVEL}")
    digits = [g[1:] for g in xs.split("/") if g] + [last]
    index = int("".join(digits))
    width = TILE_WIDTH if width_s is None else int(width_s)
    if width_s is not None and width >= TILE_WIDTH:
        raise TileError(f"{path!r}: a partial tile's width must be 1..255")
    ref = TileRef(level, index, width)
    if ref.path != path:
        raise TileError(f"{path!r} is not canonical (expected {ref.path!r})")
    return ref


def encode_bundle(entries: Sequence[bytes]) -> bytes:
    """An entry bundle: each entry as a big-endian uint16 length followed by its bytes."""
    out = bytearray()
    for number, entry in enumerate(entries):
        if len(entry) > MAX_ENTRY:
            raise TileError(
                f"entry {number} of the bundle is {len(entry)} bytes; tlog-tiles entries are at "
                f"most {MAX_ENTRY} bytes"
            )
        out += len(entry).to_bytes(2, "big") + entry
    return bytes(out)


def decode_bundle(data: bytes, what: str = "entry bundle") -> list[bytes]:
    """Split an entry bundle into its entries; raise :class:`TileError` when it is truncated."""
    entries: list[bytes] = []
    pos = 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise TileError(f"{what}: truncated length prefix at byte {pos}")
        size = int.from_bytes(data[pos : pos + 2], "big")
        pos += 2
        if pos + size > len(data):
            raise TileError(f"{what}: entry {len(entries)} runs past the end ({size} bytes)")
        entries.append(data[pos : pos + size])
        pos += size
    return entries


def tiles_for(leaves: Sequence[bytes], size: int) -> Iterator[tuple[TileRef, bytes]]:
    """Every hash tile of the tree of the first ``size`` leaf hashes, level by level.

    Level 0 holds the leaf hashes; each hash at level L+1 is the Merkle Tree Hash of a *full*
    tile at level L (partial tiles are never hashed upward). Empty tiles are not produced.
    """
    if size > len(leaves):
        raise TileError(f"tree size {size} is beyond the {len(leaves)} leaves given")
    hashes = list(leaves[:size])
    level = 0
    while hashes:
        for index in range(0, (len(hashes) + TILE_WIDTH - 1) // TILE_WIDTH):
            chunk = hashes[index * TILE_WIDTH : (index + 1) * TILE_WIDTH]
            yield TileRef(level, index, len(chunk)), b"".join(chunk)
        full = len(hashes) // TILE_WIDTH
        hashes = [
            root_from_leaf_hashes(hashes[i * TILE_WIDTH : (i + 1) * TILE_WIDTH])
            for i in range(full)
        ]
        level += 1


def write_once(path: Path, data: bytes) -> bool:
    """Write an immutable file atomically; True when written, False when already there.

    The bytes go to a temporary file in the same directory, are fsynced, and are hard-linked to
    ``path``, which fails when ``path`` exists, so a published file is never replaced and a
    reader never sees a half-written one. An existing file with other bytes raises
    :class:`TileError`.
    """
    if path.exists():
        if path.read_bytes() != data:
            raise TileError(
                f"{path} is already published with different bytes: the log being published is "
                "not the history this directory holds (a fork or a rewritten ledger); nothing "
                "was replaced"
            )
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)
        except FileExistsError:  # a concurrent writer won: it must have written the same bytes
            return write_once(path, data)
    finally:
        os.unlink(tmp)
    return True


def _replace(path: Path, data: bytes) -> None:
    """Replace a mutable file (the checkpoint) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@dataclass
class PublishResult:
    """What one :func:`publish` call wrote."""

    size: int
    entries_published: int
    tiles_written: list[str]
    blobs_written: list[str]
    checkpoint_replaced: bool
    plan: Any = None  # what decided it (runner._publish.Plan for a study)


def publish(
    directory: Path,
    *,
    note: str,
    size: int,
    leaves: Sequence[bytes],
    entries: Sequence[bytes],
    entries_upto: int,
    blob_refs: Sequence[Mapping[str, str]] = (),
    blob: Callable[[str], bytes | None] | None = None,
    published_size: int | None = None,
) -> PublishResult:
    """Publish the tree of ``size`` leaves into ``directory`` with ``note`` as its checkpoint.

    ``leaves`` are the leaf hashes and ``entries`` the envelopes (at least ``size`` of each);
    only entry bundles lying wholly below ``entries_upto`` are written (the blinding rule of
    ``docs/service.md`` §3 decides it), with the blobs those entries reference (``blob_refs[i]``
    is entry i's name -> SHA-256; ``blob`` reads one's stored bytes, or None for one withheld).
    Tiles come first, the checkpoint last, so a reader who sees the checkpoint finds every tile
    it needs. ``published_size`` is the size
    of the checkpoint already in the directory: a smaller ``size`` is refused (a rollback).
    """
    if published_size is not None and size < published_size:
        raise TileError(
            f"{directory}: it publishes a checkpoint of size {published_size}; refusing to roll "
            f"it back to size {size}"
        )
    written: list[str] = []
    for ref, data in tiles_for(leaves, size):
        if write_once(directory / ref.path, data):
            written.append(ref.path)
    blobs_written: list[str] = []
    upto = min(entries_upto, size)
    for index in range(0, (size + TILE_WIDTH - 1) // TILE_WIDTH):
        start = index * TILE_WIDTH
        end = min(start + TILE_WIDTH, size)
        if end > upto:
            break
        ref = TileRef(ENTRIES, index, end - start)
        target = directory / ref.path
        if not target.exists():
            for i in range(start, end):
                if leaves[i] != hashlib.sha256(b"\x00" + entries[i]).digest():
                    raise TileError(f"entry {i} does not hash to its leaf hash")
            for refs in blob_refs[start:end]:
                for digest in refs.values():
                    name = f"blob/{digest}"
                    if blob is not None and not (directory / name).exists():
                        stored = blob(digest)
                        if stored is None:  # withheld (a sealed blob: docs/privacy.md)
                            continue
                        if hashlib.sha256(stored).hexdigest() != digest:
                            raise TileError(f"blob {digest} does not hash to its name")
                        if write_once(directory / name, stored):
                            blobs_written.append(name)
        if write_once(target, encode_bundle(entries[start:end])):
            written.append(ref.path)
    current = directory / "checkpoint"
    replaced = not current.exists() or current.read_text("utf-8") != note
    if replaced:
        _replace(current, note.encode("utf-8"))
    published = sum(
        min(TILE_WIDTH, size - i * TILE_WIDTH)
        for i in range(0, (size + TILE_WIDTH - 1) // TILE_WIDTH)
        if min((i + 1) * TILE_WIDTH, size) <= upto
    )
    return PublishResult(size, published, written, blobs_written, replaced)
