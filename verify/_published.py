"""``ledger verify ARCHIVE --log URL``: the archive must be exactly the log published at URL.

Written from ``docs/service.md`` §2 (the tlog-tiles layout) and ``c2sp.org/tlog-tiles``: the
archive's envelopes (``ledger/events.jsonl``, canonical JSON) give the leaf hashes; every hash
tile of the tree is recomputed from them and compared, byte for byte, with the one fetched from
``URL/tile/<L>/<N>[.p/<W>]``; every entry bundle ``URL/tile/entries/<N>[.p/<W>]`` that is
published must hold exactly the archive's envelopes; ``URL/checkpoint`` must be signed by a
trusted key, name the archive's size and have the archive's root.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from verify._canonical import canonical_json
from verify._merkle import merkle_root
from verify._note import open_checkpoint, parse_vkey
from verify._report import Check, Status

__all__ = ["check_published_log", "tile_path"]

_WIDTH = 256
_MAX = 64 << 20


def tile_path(level: str, index: int, width: int) -> str:
    """``tile/<level>/<N>[.p/<W>]``, the index in 3-digit elements, all but the last ``x``-led."""
    groups = []
    while True:
        groups.append(index % 1000)
        index //= 1000
        if not index:
            break
    groups.reverse()
    name = "/".join(("x" if i < len(groups) - 1 else "") + f"{g:03d}" for i, g in enumerate(groups))
    return f"tile/{level}/{name}" + ("" if width == _WIDTH else f".p/{width}")


def _http(url: str, timeout: float) -> Callable[[str], bytes | None]:
    base = url.rstrip("/")

    def fetch(path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"{base}/{path}", timeout=timeout) as response:
                return bytes(response.read(_MAX + 1))[:_MAX]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise OSError(f"{base}/{path}: HTTP {exc.code}") from None

    return fetch


def _tiles(leaves: list[bytes]) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    hashes, level = leaves, 0
    while hashes:
        for i in range(0, len(hashes), _WIDTH):
            chunk = hashes[i : i + _WIDTH]
            out.append((tile_path(str(level), i // _WIDTH, len(chunk)), b"".join(chunk)))
        hashes = [
            merkle_root(hashes[i : i + _WIDTH]) for i in range(0, len(hashes) - _WIDTH + 1, _WIDTH)
        ]
        level += 1
    return out


def _envelopes(events: str) -> list[bytes]:
    """The canonical envelope of each line of an archive's ``ledger/events.jsonl``."""
    with open(events, "rb") as handle:
        lines = handle.read().splitlines()
    return [canonical_json(json.loads(line)["envelope"]) for line in lines if line]


def _tree_problem(url: str, size: int, root: bytes, leaves: list[bytes]) -> str | None:
    """Why the published checkpoint is not the archive's tree (its size, then its root)."""
    if size != len(leaves):
        return f"the log published at {url} has {size} events, the archive {len(leaves)}"
    if merkle_root(leaves) != root:
        return f"the archive's Merkle root is not the root of the checkpoint published at {url}"
    return None


def _tiles_problem(
    get: Callable[[str], bytes | None], url: str, leaves: list[bytes]
) -> tuple[str, str] | None:
    """(why, tile path) of the first published hash tile that is not the archive's, or None."""
    for path, expected in _tiles(leaves):
        if get(path) != expected:
            return f"{url}/{path} is not the tile the archive's events give", path
    return None


def _bundles(
    get: Callable[[str], bytes | None], url: str, envelopes: list[bytes]
) -> tuple[int, tuple[str, str] | None]:
    """(entry bundles withheld, (why, path) of the first that is not the archive's, or None)."""
    withheld = 0
    for i in range(0, len(envelopes), _WIDTH):
        chunk = envelopes[i : i + _WIDTH]
        path = tile_path("entries", i // _WIDTH, len(chunk))
        got = get(path)
        if got is None:
            withheld += 1
            continue
        if got != b"".join(len(e).to_bytes(2, "big") + e for e in chunk):
            why = f"{url}/{path} does not hold the archive's envelopes {i}..{i + len(chunk) - 1}"
            return withheld, (why, path)
    return withheld, None


def check_published_log(
    archive: str | os.PathLike[str],
    url: str,
    trusted_keys: Sequence[str] = (),
    timeout: float = 30.0,
    fetch: Callable[[str], bytes | None] | None = None,
) -> list[Check]:
    """The ``published-log`` checks of ``archive`` against the log published at ``url``.

    One PASS, or one FAIL naming the tile or bundle at fault; a WARN when bundles are withheld.
    """
    name = "published-log"
    get = fetch or _http(url, timeout)
    events = os.path.join(os.fspath(archive), "ledger", "events.jsonl")
    try:
        envelopes = _envelopes(events)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [Check(name, Status.FAIL, f"cannot read {events}: {exc}", where=events)]
    leaves = [hashlib.sha256(b"\x00" + e).digest() for e in envelopes]
    keys = list(trusted_keys)
    self_asserted = not keys
    if self_asserted and envelopes:
        keys = [json.loads(envelopes[0])["body"]["vkey"]]
    try:
        raw = get("checkpoint")
        if raw is None:
            return [Check(name, Status.FAIL, f"{url}/checkpoint is not published")]
        _, checkpoint = open_checkpoint(raw, [parse_vkey(k) for k in keys])
    except OSError as exc:
        return [Check(name, Status.FAIL, f"cannot fetch the published log: {exc}")]
    except Exception as exc:  # this package's note and key errors, each with its reason
        return [Check(name, Status.FAIL, f"{url}/checkpoint does not verify: {exc}")]
    differs = _tree_problem(url, checkpoint.size, checkpoint.root, leaves)
    if differs is not None:
        return [Check(name, Status.FAIL, differs)]
    try:
        withheld, failed = 0, _tiles_problem(get, url, leaves)
        if failed is None:
            withheld, failed = _bundles(get, url, envelopes)
    except OSError as exc:
        return [Check(name, Status.FAIL, f"cannot fetch the published log: {exc}")]
    if failed is not None:
        return [Check(name, Status.FAIL, failed[0], where=failed[1])]
    return _equal(url, len(leaves), self_asserted, withheld)


def _equal(url: str, n: int, self_asserted: bool, withheld: int) -> list[Check]:
    """The checks of a published log equal to the archive (WARN: self-asserted, withheld)."""
    name = "published-log"
    how = (
        "signed by the archive's own genesis key (self-asserted: give --trusted-key)"
        if self_asserted
        else "signed by a trusted key"
    )
    checks = [
        Check(
            name,
            Status.WARN if self_asserted else Status.PASS,
            f"the log published at {url} is exactly the archive's {n} events: "
            f"checkpoint {how}, every hash tile and entry bundle equal",
        )
    ]
    if withheld:
        checks.append(
            Check(
                name,
                Status.WARN,
                f"{withheld} entry bundle(s) are not published at "
                f"{url} (withheld while blind?); their leaf hashes match",
            )
        )
    return checks
