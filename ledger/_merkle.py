"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and proof verification.

Proof construction is written against a ``range_hash(start, end)`` callable, so the same code
serves an in-memory list of leaves (tests, tools) and the SQLite store, which answers each
``range_hash`` from its table of complete-subtree hashes in O(log n) reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ledger._errors import ProofError

EMPTY_ROOT = hashlib.sha256(b"").digest()

RangeHash = Callable[[int, int], bytes]


def leaf_hash(data: bytes) -> bytes:
    """Return the RFC 6962 leaf hash SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 6962 interior node hash SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """Largest power of two strictly less than ``size`` (size >= 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def decompose(start: int, end: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into aligned complete subtrees, largest first, as (level, index).

    ``start`` must be aligned to a power of two at least ``end - start``, which holds for every
    range the RFC 9162 recursion visits. The RFC hash of the range is the right-to-left fold of
    these subtrees' hashes.
    """
    out: list[tuple[int, int]] = []
    pos = start
    remaining = end - start
    while remaining:
        level = remaining.bit_length() - 1
        width = 1 << level
        if pos % width:
            raise ProofError(f"range [{start}, {end}) is not aligned to the tree")
        out.append((level, pos >> level))
        pos += width
        remaining -= width
    return out


def fold(hashes: Sequence[bytes]) -> bytes:
    """Fold complete-subtree hashes (largest first) right to left into one tree hash."""
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def root_from_leaves(leaves: Sequence[bytes]) -> bytes:
    """Return MTH over leaf *data* (not leaf hashes); the empty tree is SHA-256("")."""
    return root_from_leaf_hashes([leaf_hash(d) for d in leaves])


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """Return MTH given the leaf hashes, in O(n) with a stack of complete subtrees."""
    if not hashes:
        return EMPTY_ROOT
    stack: list[tuple[int, bytes]] = []
    for h in hashes:
        level, cur = 0, h
        while stack and stack[-1][0] == level:
            cur = node_hash(stack.pop()[1], cur)
            level += 1
        stack.append((level, cur))
    return fold([h for _, h in stack])


def list_range_hash(hashes: Sequence[bytes]) -> RangeHash:
    """Return a ``range_hash`` over an in-memory list of leaf hashes."""

    def range_hash(start: int, end: int) -> bytes:
        return root_from_leaf_hashes(hashes[start:end])

    return range_hash


def inclusion_proof(index: int, size: int, range_hash: RangeHash) -> list[bytes]:
    """Return PATH(index, D[size]) of RFC 9162 §2.1.3.1, bottom-up."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            path.append(range_hash(lo + k, hi))
            hi = lo + k
        else:
            path.append(range_hash(lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_proof(old: int, new: int, range_hash: RangeHash) -> list[bytes]:
    """Return PROOF(old, D[new]) of RFC 9162 §2.1.4.1 (empty when old == new)."""
    if not 0 < old <= new:
        raise ProofError(f"consistency proof needs 0 < old <= new, got old={old}, new={new}")
    proof: list[bytes] = []
    lo, hi, m, complete = 0, new, old, True
    while True:
        size = hi - lo
        if m == size:
            if not complete:
                proof.append(range_hash(lo, hi))
            break
        k = _split(size)
        if m <= k:
            proof.append(range_hash(lo + k, hi))
            hi = lo + k
        else:
            proof.append(range_hash(lo, lo + k))
            lo += k
            m -= k
            complete = False
    proof.reverse()
    return proof


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Verify an inclusion proof for a leaf *hash* (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < size or any(len(p) != 32 for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Verify a consistency proof between two tree heads (RFC 9162 §2.1.4.2)."""
    if any(len(p) != 32 for p in proof):
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0 and new > 0:
        return not proof  # the empty tree is a prefix of every tree (as transparency-dev/merkle)
    if not 0 < old < new or not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root
