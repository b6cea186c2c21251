"""RFC 6962 / RFC 9162 Merkle vectors (transparency-dev/merkle) and exhaustive proof checks."""

from __future__ import annotations

import hashlib

import pytest

from verify import (
    EMPTY_ROOT,
    CompactTree,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    merkle_root,
    node_hash,
    verify_consistency,
    verify_inclusion,
)
from verify._merkle import LeafHashes

# transparency-dev/merkle proof/verify_test.go and rfc6962/rfc6962_test.go
LEAVES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
HASHES = [leaf_hash(d) for d in LEAVES]
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")

# (leaf index, tree size, proof) and (size1, size2, proof), same source
INCLUSION_VECTORS = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CONSISTENCY_VECTORS = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]


def root(size: int) -> bytes:
    return bytes.fromhex(ROOTS[size - 1])


def test_empty_tree_and_single_leaf() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert merkle_root([]) == EMPTY_ROOT
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )


def test_node_hash_is_rfc6962() -> None:
    left, right = b"N123", b"N456"
    assert node_hash(left, right) == hashlib.sha256(b"\x01N123N456").digest()
    assert leaf_hash(b"L123456") == hashlib.sha256(b"\x00L123456").digest()


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_of_every_prefix(size: int) -> None:
    assert merkle_root(HASHES[:size]).hex() == ROOTS[size - 1]


def test_published_roots() -> None:
    assert merkle_root(HASHES).hex() == (
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    )
    assert merkle_root(HASHES[:2]).hex() == (
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"
    )


def test_compact_tree_matches_and_emits_every_complete_node() -> None:
    tree = CompactTree()
    nodes: dict[tuple[int, int], bytes] = {}
    assert tree.root() == EMPTY_ROOT
    for size, h in enumerate(HASHES, start=1):
        for level, idx, node in tree.append(h):
            nodes[(level, idx)] = node
        assert tree.root().hex() == ROOTS[size - 1]
    # every complete subtree of level >= 1 of an 8-leaf tree: 4 + 2 + 1 nodes
    assert sorted(nodes) == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0)]
    assert nodes[(3, 0)].hex() == ROOTS[7]
    assert nodes[(2, 0)].hex() == ROOTS[3]
    assert nodes[(1, 0)].hex() == ROOTS[1]


def test_leaf_hashes_container() -> None:
    leaves = LeafHashes()
    for h in HASHES:
        leaves.append(h)
    assert len(leaves) == 8
    assert list(leaves) == HASHES
    assert leaves[-1] == HASHES[-1]
    assert merkle_root(leaves).hex() == ROOTS[7]
    with pytest.raises(IndexError):
        leaves[8]


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_VECTORS)
def test_inclusion_vectors(index: int, size: int, proof: list[str]) -> None:
    want = [bytes.fromhex(p) for p in proof]
    assert inclusion_proof(index, HASHES[:size]) == want
    assert verify_inclusion(index, size, HASHES[index], want, root(size))


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY_VECTORS)
def test_consistency_vectors(old: int, new: int, proof: list[str]) -> None:
    want = [bytes.fromhex(p) for p in proof]
    assert consistency_proof(old, HASHES[:new]) == want
    assert verify_consistency(old, new, want, root(old), root(new))


def _flip(proof: list[bytes], i: int, bit: int) -> list[bytes]:
    out = list(proof)
    out[i] = bytes([out[i][0] ^ bit]) + out[i][1:]
    return out


def _inclusion_corruptions(
    index: int, size: int, proof: list[bytes]
) -> list[tuple[str, int, int, bytes, list[bytes], bytes]]:
    h, r = HASHES[index], root(size)
    probes = [
        ("index - 1", index - 1, size, h, proof, r),
        ("index + 1", index + 1, size, h, proof, r),
        ("index ^ 2", index ^ 2, size, h, proof, r),
        ("size * 2", index, size * 2, h, proof, r),
        ("size / 2", index, size // 2, h, proof, r),
        ("wrong leaf", index, size, leaf_hash(b"WrongLeaf"), proof, r),
        ("empty root", index, size, h, proof, EMPTY_ROOT),
        ("random root", index, size, h, proof, SOME_HASH),
        ("trailing garbage", index, size, h, [*proof, b""], r),
        ("trailing root", index, size, h, [*proof, r], r),
        ("preceding garbage", index, size, h, [b"", *proof], r),
        ("preceding root", index, size, h, [r, *proof], r),
        ("extra element", index, size, h, [*proof, SOME_HASH], r),
    ]
    for i in range(len(proof)):
        probes.append((f"proof[{i}] bit 3 flipped", index, size, h, _flip(proof, i, 8), r))
        probes.append((f"proof[{i}] low bit flipped", index, size, h, _flip(proof, i, 1), r))
    if proof:
        probes.append(("missing last element", index, size, h, proof[:-1], r))
        probes.append(("missing first element", index, size, h, proof[1:], r))
    if len(proof) > 1:
        probes.append(("inserted element", index, size, h, [proof[0], SOME_HASH, *proof[1:]], r))
    return probes


def _inclusion_genuine(index: int, size: int, h: bytes, proof: list[bytes], r: bytes) -> bool:
    if not 0 <= index < size <= 8:
        return False
    return h == HASHES[index] and r == root(size) and proof == inclusion_proof(index, HASHES[:size])


@pytest.mark.parametrize("size", range(1, 9))
def test_every_inclusion_proof_verifies_and_every_corruption_fails(size: int) -> None:
    for index in range(size):
        proof = inclusion_proof(index, HASHES[:size])
        assert verify_inclusion(index, size, HASHES[index], proof, root(size))
        for desc, i, n, h, p, r in _inclusion_corruptions(index, size, proof):
            ok = verify_inclusion(i, n, h, p, r)
            assert ok == _inclusion_genuine(i, n, h, p, r), f"{index}@{size}: {desc} gave {ok}"


def _consistency_corruptions(
    old: int, new: int, proof: list[bytes]
) -> list[tuple[str, int, int, list[bytes], bytes, bytes]]:
    r1, r2 = root(old), root(new)
    probes = [
        ("old - 1", old - 1, new, proof, r1, r2),
        ("old + 1", old + 1, new, proof, r1, r2),
        ("old ^ 2", old ^ 2, new, proof, r1, r2),
        ("new * 2", old, new * 2, proof, r1, r2),
        ("new / 2", old, new // 2, proof, r1, r2),
        ("wrong old root", old, new, proof, SOME_HASH, r2),
        ("wrong new root", old, new, proof, r1, SOME_HASH),
        ("swapped roots", old, new, proof, r2, r1),
        ("empty proof", old, new, [], r1, r2),
        ("trailing garbage", old, new, [*proof, b""], r1, r2),
        ("trailing old root", old, new, [*proof, r1], r1, r2),
        ("trailing new root", old, new, [*proof, r2], r1, r2),
        ("extra element", old, new, [*proof, SOME_HASH], r1, r2),
        ("preceding garbage", old, new, [b"", *proof], r1, r2),
        ("preceding old root", old, new, [r1, *proof], r1, r2),
        ("preceding new root", old, new, [r2, *proof], r1, r2),
        ("preceding proof[0]", old, new, [proof[0], *proof], r1, r2),
        ("missing last element", old, new, proof[:-1], r1, r2),
        ("missing first element", old, new, proof[1:], r1, r2),
    ]
    for i in range(len(proof)):
        probes.append((f"proof[{i}] bit 4 flipped", old, new, _flip(proof, i, 16), r1, r2))
        probes.append((f"proof[{i}] low bit flipped", old, new, _flip(proof, i, 1), r1, r2))
    return probes


def _genuinely_valid(old: int, new: int, proof: list[bytes], r1: bytes, r2: bytes) -> bool:
    if not (1 <= old <= new <= 8):
        return False
    return r1 == root(old) and r2 == root(new) and proof == consistency_proof(old, HASHES[:new])


@pytest.mark.parametrize("new", range(1, 9))
def test_every_consistency_proof_verifies_and_every_corruption_fails(new: int) -> None:
    for old in range(1, new + 1):
        proof = consistency_proof(old, HASHES[:new])
        assert verify_consistency(old, new, proof, root(old), root(new)), (old, new)
        if old == new:
            assert proof == []
            assert not verify_consistency(old, new, [SOME_HASH], root(old), root(new))
            assert not verify_consistency(old, new, [], SOME_HASH, root(new))
            continue
        for desc, o, n, p, r1, r2 in _consistency_corruptions(old, new, proof):
            ok = verify_consistency(o, n, p, r1, r2)
            assert ok == _genuinely_valid(o, n, p, r1, r2), f"{old}->{new}: {desc} gave {ok}"


def test_consistency_from_empty_tree() -> None:
    assert consistency_proof(0, HASHES) == []
    assert verify_consistency(0, 8, [], EMPTY_ROOT, root(8))
    assert not verify_consistency(0, 8, [], SOME_HASH, root(8))
    assert not verify_consistency(0, 8, [SOME_HASH], EMPTY_ROOT, root(8))
    assert verify_consistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)


@pytest.mark.parametrize(
    ("old", "new"), [(1, 0), (2, 1), (8, 7), (-1, 3)], ids=["1-0", "2-1", "8-7", "neg"]
)
def test_consistency_going_back_in_time_fails(old: int, new: int) -> None:
    assert not verify_consistency(old, new, [], SOME_HASH, SOME_HASH)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (2, 1), (-1, 3), (8, 8)])
def test_inclusion_with_impossible_index_fails(index: int, size: int) -> None:
    assert not verify_inclusion(index, size, SOME_HASH, [], SOME_HASH)
    assert not verify_inclusion(index, size, SOME_HASH, [], EMPTY_ROOT)


def test_inclusion_single_entry() -> None:
    h = leaf_hash(b"data")
    assert verify_inclusion(0, 1, h, [], h)
    assert not verify_inclusion(0, 1, b"", [], h)
    assert not verify_inclusion(0, 1, h, [], b"")


def test_proof_generators_refuse_impossible_requests() -> None:
    with pytest.raises(ProofError, match="leaf index 8 is not in a tree of size 8"):
        inclusion_proof(8, HASHES)
    with pytest.raises(ProofError, match="leaf index -1"):
        inclusion_proof(-1, HASHES)
    with pytest.raises(ProofError, match=r"old size 9 is not in 0\.\.8"):
        consistency_proof(9, HASHES)


def test_larger_trees_agree_with_the_recursive_definition() -> None:
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(70)]

    def mth(d: list[bytes]) -> bytes:
        if len(d) == 1:
            return d[0]
        k = 1 << ((len(d) - 1).bit_length() - 1)
        return node_hash(mth(d[:k]), mth(d[k:]))

    tree = CompactTree()
    for n in range(1, 71):
        tree.append(hashes[n - 1])
        want = mth(hashes[:n])
        assert merkle_root(hashes[:n]) == want == tree.root()
    for old in range(1, 70, 7):
        for new in range(old, 71, 9):
            proof = consistency_proof(old, hashes[:new])
            assert verify_consistency(old, new, proof, mth(hashes[:old]), mth(hashes[:new]))
    for index in range(0, 70, 5):
        proof = inclusion_proof(index, hashes)
        assert verify_inclusion(index, 70, hashes[index], proof, mth(hashes))
