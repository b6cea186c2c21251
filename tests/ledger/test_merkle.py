"""RFC 6962 / 9162 vectors and exhaustive small-tree proofs for ledger._merkle."""

from __future__ import annotations

import json

import pytest
from locations import TESTS_DIR

from ledger._merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    list_range_hash,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)

VECTORS = json.loads((TESTS_DIR / "vectors" / "rfc6962.json").read_text())
LEAVES = [bytes.fromhex(x) for x in VECTORS["leaves"]]
HASHES = [leaf_hash(x) for x in LEAVES]
ROOTS = [bytes.fromhex(x) for x in VECTORS["roots"]]
RANGE = list_range_hash(HASHES)
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def test_empty_root() -> None:
    assert EMPTY_ROOT.hex() == VECTORS["empty_root"]
    assert root_from_leaves([]) == EMPTY_ROOT


def test_leaf_hash_of_empty_leaf() -> None:
    expected = "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert leaf_hash(b"").hex() == expected


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_sizes_1_to_8(size: int) -> None:
    assert root_from_leaves(LEAVES[:size]) == ROOTS[size - 1]


@pytest.mark.parametrize("vector", VECTORS["inclusion"], ids=lambda v: f"{v['index']}-{v['size']}")
def test_published_inclusion_proofs(vector: dict[str, object]) -> None:
    index, size = int(vector["index"]), int(vector["size"])  # type: ignore[call-overload]
    expected = [bytes.fromhex(h) for h in vector["path"]]  # type: ignore[attr-defined]
    assert inclusion_proof(index, size, RANGE) == expected
    assert verify_inclusion(index, size, HASHES[index], expected, ROOTS[size - 1])


@pytest.mark.parametrize("vector", VECTORS["consistency"], ids=lambda v: f"{v['old']}-{v['new']}")
def test_published_consistency_proofs(vector: dict[str, object]) -> None:
    old, new = int(vector["old"]), int(vector["new"])  # type: ignore[call-overload]
    expected = [bytes.fromhex(h) for h in vector["path"]]  # type: ignore[attr-defined]
    assert consistency_proof(old, new, RANGE) == expected
    assert verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], expected)


def _inclusion_corruptions(
    index: int, size: int, proof: list[bytes]
) -> list[tuple[str, int, int, bytes, list[bytes], bytes]]:
    leaf, root = HASHES[index], ROOTS[size - 1]
    cases = [
        ("index-1", index - 1, size, leaf, proof, root),
        ("index+1", index + 1, size, leaf, proof, root),
        ("index^2", index ^ 2, size, leaf, proof, root),
        ("size*2", index, size * 2, leaf, proof, root),
        ("size/2", index, size // 2, leaf, proof, root),
        ("wrong leaf", index, size, SOME_HASH, proof, root),
        ("wrong root", index, size, leaf, proof, SOME_HASH),
        ("empty root", index, size, leaf, proof, EMPTY_ROOT),
        ("extra element", index, size, leaf, [*proof, root], root),
        ("preceding element", index, size, leaf, [root, *proof], root),
        ("short element", index, size, leaf, [*proof, b""], root),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([proof[i][0] ^ 8]) + proof[i][1:]
        cases.append((f"flipped bit in [{i}]", index, size, leaf, flipped, root))
    if proof:
        cases.append(("missing element", index, size, leaf, proof[:-1], root))
        cases.append(("missing first element", index, size, leaf, proof[1:], root))
    return cases


@pytest.mark.parametrize("size", range(1, 9))
def test_every_inclusion_proof_up_to_8(size: int) -> None:
    for index in range(size):
        proof = inclusion_proof(index, size, RANGE)
        assert verify_inclusion(index, size, HASHES[index], proof, ROOTS[size - 1])
        for name, i, n, leaf, bad, root in _inclusion_corruptions(index, size, proof):
            if (i, n, leaf, bad, root) == (index, size, HASHES[index], proof, ROOTS[size - 1]):
                continue
            if 0 <= i < n <= 8 and n == size and leaf == HASHES[i] and bad == proof:
                continue  # a different valid statement is not a corruption
            assert not verify_inclusion(i, n, leaf, bad, root), (index, size, name)


@pytest.mark.parametrize("new", range(1, 9))
def test_every_consistency_proof_up_to_8(new: int) -> None:
    for old in range(1, new + 1):
        proof = consistency_proof(old, new, RANGE)
        r1, r2 = ROOTS[old - 1], ROOTS[new - 1]
        assert verify_consistency(old, new, r1, r2, proof)
        if not proof:
            assert old == new
            assert not verify_consistency(old, new, r1, SOME_HASH, proof)
            continue
        cases = [
            ("old-1", old - 1, new, r1, r2, proof),
            ("old+1", old + 1, new, r1, r2, proof),
            ("old^2", old ^ 2, new, r1, r2, proof),
            ("new*2", old, new * 2, r1, r2, proof),
            ("new/2", old, new // 2, r1, r2, proof),
            ("wrong old root", old, new, SOME_HASH, r2, proof),
            ("wrong new root", old, new, r1, SOME_HASH, proof),
            ("swapped roots", old, new, r2, r1, proof),
            ("empty proof", old, new, r1, r2, []),
            ("extra element", old, new, r1, r2, [*proof, r1]),
            ("extra root2", old, new, r1, r2, [*proof, r2]),
            ("preceding element", old, new, r1, r2, [proof[0], *proof]),
            ("missing element", old, new, r1, r2, proof[:-1]),
        ]
        for i in range(len(proof)):
            flipped = list(proof)
            flipped[i] = bytes([proof[i][0] ^ 16]) + proof[i][1:]
            cases.append((f"flipped bit in [{i}]", old, new, r1, r2, flipped))
        for name, o, n, a, b, p in cases:
            valid_pair = 0 < o <= n <= 8 and (o, n) != (old, new)
            genuine = None
            if valid_pair:
                genuine = (ROOTS[o - 1], ROOTS[n - 1], consistency_proof(o, n, RANGE))
            if (a, b, p) == genuine:
                continue  # accidentally a different valid proof
            assert not verify_consistency(o, n, a, b, p), (old, new, name)


def test_out_of_range_requests_raise() -> None:
    from ledger import ProofError

    with pytest.raises(ProofError, match="outside a tree of size 3"):
        inclusion_proof(3, 3, RANGE)
    with pytest.raises(ProofError, match="0 < old <= new"):
        consistency_proof(4, 3, RANGE)


def test_empty_tree_is_consistent_with_everything_only_with_empty_proof() -> None:
    assert verify_consistency(0, 3, EMPTY_ROOT, ROOTS[2], [])
    assert not verify_consistency(0, 3, EMPTY_ROOT, ROOTS[2], [ROOTS[0]])
    assert not verify_consistency(2, 1, ROOTS[1], ROOTS[0], [])
