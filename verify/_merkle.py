"""RFC 9162 §2.1 Merkle tree hashing, proofs and proof verification.

Everything here works on *leaf hashes* (``SHA-256(0x00 || data)``), never on raw data, because
that is what a ledger stores and what the hash chain links.  Proof generation follows §2.1.3.1 and
§2.1.4.1 (descending over ranges); verification follows §2.1.3.2 and §2.1.4.2 step by step.
:class:`CompactTree` computes roots incrementally while a log is streamed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

from verify._errors import ProofError

__all__ = [
    "EMPTY_ROOT",
    "CompactTree",
    "LeafHashes",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "merkle_root",
    "node_hash",
    "verify_consistency",
    "verify_inclusion",
]

_sha256 = hashlib.sha256

EMPTY_ROOT: bytes = _sha256(b"").digest()
"""``MTH({})``: the root of the empty tree, SHA-256 of the empty string."""


def leaf_hash(data: bytes) -> bytes:
    """Return the RFC 9162 leaf hash ``SHA-256(0x00 || data)``."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 9162 interior node hash ``SHA-256(0x01 || left || right)``."""
    return _sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _mth(leaves: Sequence[bytes], start: int, end: int) -> bytes:
    """``MTH(D[start:end])`` over leaf hashes, iteratively with a stack (no deep recursion)."""
    n = end - start
    if n == 0:
        return EMPTY_ROOT
    stack: list[tuple[int, bytes]] = []  # (subtree size, hash), sizes strictly decreasing
    for i in range(start, end):
        size, h = 1, leaves[i]
        while stack and stack[-1][0] == size:
            left_size, left = stack.pop()
            size, h = size + left_size, node_hash(left, h)
        stack.append((size, h))
    root = stack[-1][1]
    for _, h in reversed(stack[:-1]):
        root = node_hash(h, root)
    return root


def merkle_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """Return the Merkle tree hash ``MTH(D[n])`` of a list of leaf hashes (RFC 9162 §2.1.1)."""
    return _mth(leaf_hashes, 0, len(leaf_hashes))


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the inclusion proof ``PATH(index, D[n])`` with ``n = len(leaf_hashes)`` (§2.1.3.1).

    Raises :class:`ProofError` unless ``0 <= index < n``.
    """
    n = len(leaf_hashes)
    if not 0 <= index < n:
        raise ProofError(f"inclusion proof: leaf index {index} is not in a tree of size {n}")
    proof: list[bytes] = []
    start, end, m = 0, n, index
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            proof.append(_mth(leaf_hashes, start + k, end))
            end = start + k
        else:
            proof.append(_mth(leaf_hashes, start, start + k))
            start, m = start + k, m - k
    proof.reverse()
    return proof


def consistency_proof(old_size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the consistency proof ``PROOF(old_size, D[n])``, ``n = len(leaf_hashes)`` (§2.1.4.1).

    The proof is empty when ``old_size`` is ``0`` or ``n``.  Raises :class:`ProofError` unless
    ``0 <= old_size <= n``.
    """
    n = len(leaf_hashes)
    if not 0 <= old_size <= n:
        raise ProofError(f"consistency proof: old size {old_size} is not in 0..{n}")
    if old_size in (0, n):
        return []
    proof: list[bytes] = []
    start, end, m, complete = 0, n, old_size, True
    while True:
        size = end - start
        if m == size:
            if not complete:
                proof.append(_mth(leaf_hashes, start, end))
            break
        k = _split(size)
        if m <= k:
            proof.append(_mth(leaf_hashes, start + k, end))
            end = start + k
        else:
            proof.append(_mth(leaf_hashes, start, start + k))
            start, m, complete = start + k, m - k, False
    proof.reverse()
    return proof


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == 32


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Verify that ``leaf`` (a leaf hash) is at ``index`` in the tree of ``size`` with ``root``.

    RFC 9162 §2.1.3.2.  Returns ``False`` for any malformed input instead of raising.
    """
    if not (0 <= index < size) or not _is_hash(leaf) or not _is_hash(root):
        return False
    if not all(_is_hash(p) for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> bool:
    """Verify that the tree of ``new_size`` with ``new_root`` extends the one of ``old_size``.

    RFC 9162 §2.1.4.2, plus the trivial cases: equal sizes need an empty proof and equal roots, and
    ``old_size == 0`` needs an empty proof and ``old_root`` equal to the empty-tree hash.  Returns
    ``False`` for any malformed input instead of raising.
    """
    if not (0 <= old_size <= new_size) or not _is_hash(old_root) or not _is_hash(new_root):
        return False
    if not all(_is_hash(p) for p in proof):
        return False
    if old_size == new_size:
        return len(proof) == 0 and old_root == new_root
    if old_size == 0:
        return len(proof) == 0 and old_root == EMPTY_ROOT
    path = list(proof)
    if not path:
        return False
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a proof node
        path.insert(0, old_root)
    roots = _consistency_roots(old_size, new_size, path)
    return roots is not None and roots == (old_root, new_root)


def _consistency_roots(
    old_size: int, new_size: int, path: list[bytes]
) -> tuple[bytes, bytes] | None:
    """RFC 9162 §2.1.4.2: the old and new roots a consistency path leads to.

    None when the path does not fit the sizes (too long, or too short to reach the root).
    """
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return (fr, sr) if sn == 0 else None


class LeafHashes(Sequence[bytes]):
    """A compact append-only list of 32-byte leaf hashes (one ``bytearray``, 32 bytes a leaf)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def append(self, h: bytes) -> None:
        """Append one 32-byte hash."""
        self._buf += h

    def __len__(self) -> int:
        return len(self._buf) >> 5

    def __getitem__(self, i: int) -> bytes:  # type: ignore[override]
        if not isinstance(i, int):
            raise TypeError("LeafHashes supports integer indexes only")
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return bytes(self._buf[i << 5 : (i + 1) << 5])

    def __iter__(self) -> Iterator[bytes]:
        buf = self._buf
        for off in range(0, len(buf), 32):
            yield bytes(buf[off : off + 32])


class CompactTree:
    """Incremental Merkle tree: a stack of complete-subtree hashes (an RFC 9162 compact range).

    :meth:`append` adds a leaf hash and returns the interior nodes it completed as
    ``(level, index, hash)`` tuples, lowest level first; :meth:`root` is ``MTH`` of all leaves
    so far.
    """

    __slots__ = ("_hashes", "size")

    def __init__(self) -> None:
        self._hashes: list[bytes] = []  # one per set bit of size, highest subtree first
        self.size = 0

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Append a leaf hash; return the complete subtrees (level >= 1) it closed."""
        hashes = self._hashes
        n = self.size
        h = leaf
        done: list[tuple[int, int, bytes]] = []
        level = 0
        while n & 1:
            h = _sha256(b"\x01" + hashes.pop() + h).digest()
            n >>= 1
            level += 1
            done.append((level, n, h))
        hashes.append(h)
        self.size += 1
        return done

    def root(self) -> bytes:
        """Return ``MTH`` of the leaves so far (the empty-tree hash when there are none)."""
        hashes = self._hashes
        if not hashes:
            return EMPTY_ROOT
        r = hashes[-1]
        for h in reversed(hashes[:-1]):
            r = node_hash(h, r)
        return r
