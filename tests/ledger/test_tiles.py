"""The read path (issue 35, docs/service.md): C2SP tlog-tiles published by ``ledger tiles`` and
served by real nginx, ``ledger monitor`` catching a fork, a rollback, a bad tile and an
unwitnessed checkpoint, receipts (C2SP tlog-proof) checked offline, blinding over HTTP, and bad
requests to ``ledger serve``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import plain_http
import pytest
from click.testing import CliRunner
from helpers import fixed_clock, fixed_key, science_skipped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nginx_server import Nginx, available

from ledger import Checkpoint, Ledger, SigningKey
from ledger._monitor import (
    ForkError,
    MonitorState,
    TileMismatchError,
    check_log,
)
from ledger._tiles import (
    ENTRIES,
    TileError,
    TileRef,
    decode_bundle,
    encode_index,
    parse_tile_path,
    tiles_for,
)
from ledger.cli import main
from ledger.tiles_server import LocalTiles
from ledger.witness import Witness, add_checkpoint
from ledger.witness_server import LocalWitness
from runner._publish import StudyPublisher, trial_receipts

ORIGIN = "example.org/tiles-test"
OWNER = fixed_key("example.org/owner")
W1 = "witness.example/w1"

needs_nginx = pytest.mark.skipif(
    not available(), reason="nginx is not installed (apt-get install nginx-light; .ci/run does)"
)


# ---------------------------------------------------------------------- paths and tiles


@pytest.mark.parametrize(
    ("index", "path"),
    [
        (0, "000"),
        (5, "005"),
        (999, "999"),
        (1000, "x001/000"),
        (1234067, "x001/x234/067"),
    ],
)
def test_index_encoding(index: int, path: str) -> None:
    assert encode_index(index) == path
    assert parse_tile_path(f"tile/0/{path}") == TileRef(0, index)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tile/0/5", "not a tile path"),
        ("tile/00/000", "not a tile path"),
        ("tile/64/000", "outside 0..63"),
        ("tile/0/x000/005", "not canonical"),
        ("tile/0/000.p/0", "not a tile path"),
        ("tile/0/000.p/256", "width must be 1..255"),
        ("tile/0/000.p/007", "not a tile path"),
        ("tile/0/../000", "not a tile path"),
        ("tile/entries/x1/000", "not a tile path"),
    ],
)
def test_bad_tile_paths(path: str, message: str) -> None:
    with pytest.raises(TileError, match=message):
        parse_tile_path(path)


def synthetic_leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"\x00" + i.to_bytes(4, "big")).digest() for i in range(n)]


def test_tiles_of_the_spec_example() -> None:
    """tlog-tiles: a tree of 70,000 is 273 full level-0 tiles, a partial one of width 112, one
    full level-1 tile, a partial level-1 tile of width 17 and a partial level-2 tile of width 1."""
    refs = [ref for ref, _ in tiles_for(synthetic_leaves(70000), 70000)]
    level0 = [r for r in refs if r.level == 0]
    assert sum(r.width == 256 for r in level0) == 273
    assert [r.width for r in level0 if r.width != 256] == [112]
    assert [r.width for r in refs if r.level == 1] == [256, 17]
    assert [r.width for r in refs if r.level == 2] == [1]
    assert [ref.path for ref, _ in tiles_for(synthetic_leaves(256), 256)] == [
        "tile/0/000",
        "tile/1/000.p/1",
    ]


def signed(size: int, leaves: list[bytes], key: SigningKey = OWNER) -> str:
    from ledger import root_from_leaf_hashes

    return Checkpoint(ORIGIN, size, root_from_leaf_hashes(leaves[:size])).sign([key])


def dict_fetch(files: dict[str, bytes]):  # type: ignore[no-untyped-def]
    return lambda path: files.get(path)


def tile_files(leaves: list[bytes], size: int) -> dict[str, bytes]:
    files = {ref.path: data for ref, data in tiles_for(leaves, size)}
    files["checkpoint"] = signed(size, leaves).encode()
    return files


def test_monitor_extends_verifies_and_catches_tampered_tiles() -> None:
    """The monitor's tree logic over 70,000 leaves: growth, a bad upper tile, a longer fork."""
    trusted = [OWNER.verifier]
    leaves = synthetic_leaves(70000)
    state300, report = check_log(dict_fetch(tile_files(leaves, 300)), "mem", trusted, None)
    assert (state300.size, report.tiles_fetched) == (300, 3)
    state, report = check_log(dict_fetch(tile_files(leaves, 70000)), "mem", trusted, state300)
    assert state.size == 70000 and report.old_size == 300
    # a level-1 tile whose hash of level-0 tile 5 is wrong: caught although the root is right
    files = tile_files(leaves, 70000)
    bad = bytearray(files["tile/1/000"])
    bad[5 * 32] ^= 1
    files["tile/1/000"] = bytes(bad)
    with pytest.raises(TileMismatchError, match=r"tile tile/0/005 does not hash to its entry 5"):
        check_log(dict_fetch(files), "mem", trusted, None)
    # a longer history whose first 300 leaves differ: its tiles agree with its checkpoint
    other = synthetic_leaves(70001)[1:]
    with pytest.raises(ForkError, match="size 70000 does not extend the checkpoint of size 300"):
        check_log(dict_fetch(tile_files(other, 70000)), "mem", trusted, state300)


# ---------------------------------------------------------------------- a published ledger


def cosign(log: Ledger, url: str, old: int) -> str:
    """Sign a checkpoint of the whole log and get the witness's cosignature on it."""
    note = log.sign_checkpoint(OWNER)
    proof = log.consistency_proof(old, log.size).path if old else ()
    lines = add_checkpoint(url, old, list(proof), note)
    return log.add_cosignatures(log.checkpoints()[-1].id, lines)


def append_trials(log: Ledger, first: int, count: int) -> None:
    for i in range(first, first + count):
        trial = f"{'AB'[i % 2]}|s{i}|1"
        log.append(
            "trial.requested",
            {"trial": trial},
            key=OWNER,
            blobs={"request": f"prompt for arm {'AB'[i % 2]} item {i}".encode()},
        )
        log.append(
            "trial.responded",
            {"trial": trial},
            key=OWNER,
            blobs={"response": f"answer {i}".encode()},
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A witnessed, blinded ledger published into www/log (a symlink) and served by nginx."""
    if not available():
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    base = tmp_path_factory.mktemp("tiles")
    witness_dir = base / "witness"
    with Witness.init(witness_dir, W1) as w:
        w.add_log(ORIGIN, [OWNER.vkey])
        witness_vkey = w.key.vkey
    study = base / "study"
    study.mkdir()
    www = base / "www"
    www.mkdir()
    with (
        LocalWitness(witness_dir) as witness,
        Ledger.create(study / "ledger.db", origin=ORIGIN, key=OWNER, clock=fixed_clock()) as log,
    ):
        log.append(
            "artifact.locked", {"path": "spec.toml"}, key=OWNER, blobs={"file": b"the locked spec"}
        )
        log.append("protocol.locked", {"blinding_commitment": "00" * 32}, key=OWNER)
        append_trials(log, 0, 150)
        cosign(log, witness.url, 0)
        first = base / "published-1"
        StudyPublisher(study, first).publish_once()
        shutil.copytree(first, base / "published-1-copy")
        append_trials(log, 150, 60)
        log.append("scoring.sealed", {}, key=OWNER)
        log.append("blinding.revealed", {"secret": "s"}, key=OWNER)
        size1 = cosign(log, witness.url, 303)
        assert size1
        second = base / "published-2"
        shutil.copytree(first, second)
        StudyPublisher(study, second).publish_once()
    (www / "log").symlink_to(base / "published-1-copy")
    with Nginx(base / "nginx", www) as nginx:
        yield {
            "base": base,
            "study": study,
            "www": www,
            "url": f"{nginx.url}/log",
            "witness": witness_vkey,
            "first": first,
            "second": second,
            "nginx": nginx,
        }


def point(world: dict[str, object], target: Path) -> None:
    link = Path(str(world["www"])) / "log"
    link.unlink()
    link.symlink_to(target)


def monitor(world: dict[str, object], state: Path, *extra: str) -> object:
    return CliRunner().invoke(
        main,
        ["monitor", str(world["url"]), "--trusted-key", OWNER.vkey, "--state", str(state), *extra],
    )


def test_blinding_holds_over_http(world: dict[str, object]) -> None:
    """Before the reveal: every hash tile, but only the lock-time entries and their blobs."""
    point(world, Path(str(world["first"])))
    url = str(world["url"])
    assert plain_http.get(f"{url}/tile/0/000").status_code == 200
    assert plain_http.get(f"{url}/tile/0/001").status_code == 404  # not full yet
    assert plain_http.get(f"{url}/tile/0/001.p/47").status_code == 200  # size 303: 256 + 47
    assert plain_http.get(f"{url}/tile/entries/000").status_code == 404  # holds trial events
    first = Path(str(world["first"]))
    names = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert not any(n.startswith("tile/entries") for n in names)
    blobs = [n for n in names if n.startswith("blob/")]
    assert blobs == []  # the lock-time prefix (3 events) is less than one bundle: withheld
    text = b"".join(p.read_bytes() for p in first.rglob("*") if p.is_file())
    assert b"arm A" not in text and b"|s1|" not in text and b"answer" not in text


def test_after_the_reveal_every_entry_and_blob_is_published(world: dict[str, object]) -> None:
    second = Path(str(world["second"]))
    point(world, second)
    url = str(world["url"])
    response = plain_http.get(f"{url}/tile/entries/000", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    entries = decode_bundle(response.content)
    assert len(entries) == 256 and json.loads(entries[3])["body"]["trial"] == "A|s0|1"
    digest = json.loads(entries[3])["blobs"]["request"]
    assert plain_http.get(f"{url}/blob/{digest}").content == b"prompt for arm A item 0"
    checkpoint = plain_http.get(f"{url}/checkpoint")
    assert checkpoint.headers["content-type"] == "text/plain; charset=utf-8"
    assert checkpoint.headers["cache-control"] == "no-cache"


def test_monitor_follows_then_catches_fork_and_rollback(
    world: dict[str, object], tmp_path: Path
) -> None:
    state = tmp_path / "monitor.json"
    witness = ["--witness", str(world["witness"])]
    point(world, Path(str(world["first"])))
    result = monitor(world, state, *witness)
    assert result.exit_code == 0, result.output
    assert "size 0 -> 303" in result.output and "cosigned by witness.example/w1" in result.output
    point(world, Path(str(world["second"])))
    result = monitor(world, state, *witness)
    assert result.exit_code == 0, result.output
    assert "size 303 -> 425" in result.output and "169 entries checked" in result.output
    saved = json.loads(state.read_text())
    # the rollback: the older publication served again
    point(world, Path(str(world["first"])))
    result = monitor(world, state, *witness)
    assert result.exit_code == 1
    assert "ROLLBACK" in result.output and "size 425" in result.output
    assert "size 303" in result.output
    assert json.loads(state.read_text()) == saved  # a failed check leaves the state alone
    # the owner's fork: a second history of the same size, signed by the owner (no witness
    # would cosign it); caught by its signature and size alone, both checkpoints named
    fork = Path(str(world["base"])) / "fork"
    forked_note = build_fork(fork, 425)
    point(world, fork / "published")
    result = monitor(world, state)
    assert result.exit_code == 1
    assert "FORK" in result.output
    assert saved["root"] in result.output
    assert forked_note.splitlines()[2] in result.output


def build_fork(base: Path, size: int) -> str:
    """The owner's other history: the same origin and key, another first event, ``size`` events."""
    base.mkdir(exist_ok=True)
    with Ledger.create(base / "ledger.db", origin=ORIGIN, key=OWNER, clock=fixed_clock()) as log:
        log.append("artifact.locked", {"path": "another-spec.toml"}, key=OWNER)
        while log.size < size:
            log.append("note.added", {"n": log.size}, key=OWNER)
        note = log.sign_checkpoint(OWNER)
    StudyPublisher(base, base / "published").publish_once()
    return note


def test_unwitnessed_and_disagreeing_tiles_are_caught(
    world: dict[str, object], tmp_path: Path
) -> None:
    # the fork carries the owner's signature only: with --witness, unwitnessed
    fork = Path(str(world["base"])) / "fork2"
    build_fork(fork, 10)
    point(world, fork / "published")
    result = monitor(world, tmp_path / "a.json", "--witness", str(world["witness"]))
    assert result.exit_code == 1 and "UNWITNESSED" in result.output
    assert not (tmp_path / "a.json").exists()
    # a level-0 tile changed on the host: the tiles no longer give the checkpoint's root
    bad = tmp_path / "bad"
    shutil.copytree(Path(str(world["second"])), bad)
    tile = bad / "tile" / "0" / "000"
    data = bytearray(tile.read_bytes())
    data[40] ^= 0x01
    tile.chmod(0o644)
    tile.write_bytes(bytes(data))
    point(world, bad)
    result = monitor(world, tmp_path / "b.json")
    assert result.exit_code == 1
    assert "does not hash to its entry 0 in tile tile/1/000.p/1" in result.output


def test_publishing_refuses_another_history(world: dict[str, object], tmp_path: Path) -> None:
    target = tmp_path / "pub"
    shutil.copytree(Path(str(world["second"])), target)
    fork = tmp_path / "fork"
    build_fork(fork, 425)
    from runner._errors import StudyError

    with pytest.raises(StudyError, match="already published with different bytes"):
        StudyPublisher(fork, target).publish_once()
    from ledger._tiles import publish

    with pytest.raises(TileError, match="refusing to roll it back to size 303"):
        publish(
            target, note="x", size=303, leaves=[], entries=[], entries_upto=0, published_size=425
        )


# ---------------------------------------------------------------------- receipts


def test_receipts_verify_offline_and_one_flipped_byte_fails(
    world: dict[str, object], tmp_path: Path
) -> None:
    found = trial_receipts(Path(str(world["study"])), "B|s151|1")
    assert [kind for _, kind, _ in found] == ["trial.requested", "trial.responded"]
    out = tmp_path / "receipts"
    result = CliRunner().invoke(
        main, ["receipt", str(world["study"]), "B|s151|1", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.tlog-proof"))
    assert len(files) == 2
    text = files[0].read_text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ") and "\nindex " in text
    args = ["--trusted-key", OWNER.vkey, "--witness", str(world["witness"])]
    result = CliRunner().invoke(main, ["verify-receipt", *map(str, files), *args])
    assert result.exit_code == 0, result.output
    assert result.output.count("PASS") == 2 and "B|s151|1" in result.output
    # the independent verifier agrees
    from verify import check_receipt

    assert check_receipt(text, [OWNER.vkey], [str(world["witness"])]).passed
    data = files[0].read_bytes()
    failures = 0
    for position in range(0, len(data), max(1, len(data) // 40)):
        flipped = bytearray(data)
        flipped[position] ^= 0x01
        path = tmp_path / f"flip-{position}.tlog-proof"
        path.write_bytes(bytes(flipped))
        result = CliRunner().invoke(main, ["verify-receipt", str(path), *args])
        assert result.exit_code != 0, f"byte {position} flipped still verifies"
        ours = check_receipt(bytes(flipped), [OWNER.vkey], [str(world["witness"])])
        assert not ours.passed, f"verify/ accepts byte {position} flipped"
        failures += 1
    assert failures >= 40
    # without the witness's cosignature the quorum fails
    result = CliRunner().invoke(
        main,
        [
            "verify-receipt",
            str(files[0]),
            "--trusted-key",
            OWNER.vkey,
            "--witness",
            fixed_witness_vkey(),
        ],
    )
    assert result.exit_code == 1 and "fewer than the quorum 1" in result.output


def fixed_witness_vkey() -> str:
    from ledger.witness import CosignerVerifier

    public = fixed_key("other").verifier.public_key
    return CosignerVerifier("witness.example/other", public).vkey


# ---------------------------------------------------------------------- ledger serve


@pytest.fixture(scope="module")
def served(world: dict[str, object]) -> Iterator[str]:
    root = Path(str(world["base"])) / "served"
    root.mkdir(exist_ok=True)
    if not (root / "study").exists():
        (root / "study").symlink_to(Path(str(world["second"])))
    with LocalTiles(root) as service:
        yield service.url


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/study/checkpoint", 200, ""),
        ("/study/tile/0/000", 200, ""),
        ("/study/tile/0/001.p/169", 200, ""),
        ("/study/tile/0/9", 400, "not a tile path"),
        ("/study/tile/0/x000/001", 400, "not canonical"),
        ("/study/tile/99/000", 400, "outside 0..63"),
        ("/study/tile/0/005", 404, "not published"),
        ("/study/blob/zz", 400, "blob/<sha256 hex>"),
        ("/study/blob/" + "0" * 64, 404, "not published"),
        ("/.hidden/checkpoint", 400, "not a log name"),
        ("/study/../../etc/passwd", 400, "not checkpoint, a tile path"),
        ("/study/%2e%2e/checkpoint", 400, ""),
        ("/nope/checkpoint", 404, "not published"),
        ("/study/ledger.db", 400, "not checkpoint, a tile path"),
    ],
)
def test_serve_answers_bad_paths_with_4xx(
    served: str, path: str, status: int, message: str
) -> None:
    response = plain_http.get(served + path)
    assert response.status_code == status, response.text
    assert message in response.text
    if response.status_code == 200 and "/tile/" in path:
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"


def test_serve_refuses_writes_and_keeps_serving(served: str) -> None:
    assert plain_http.post(served + "/study/checkpoint", content=b"x").status_code == 405
    assert plain_http.request("DELETE", served + "/study/tile/0/000").status_code == 405
    assert plain_http.get(served + "/study/checkpoint").status_code == 200


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(alphabet="tile/entriesx0123456789.p/%blob_-abcdef", max_size=60))
def test_serve_fuzzed_paths_never_fail_the_service(served: str, path: str) -> None:
    response = plain_http.get(f"{served}/study/{path}")
    assert response.status_code in (200, 400, 404), (path, response.status_code)
    assert plain_http.get(served + "/study/checkpoint").status_code == 200


@needs_nginx
def test_nginx_answers_bad_paths_with_4xx_and_keeps_serving(world: dict[str, object]) -> None:
    url = str(world["url"])
    for path in ("/tile/0/../../../etc/passwd", "/tile/", "/%00", "/tile/0/" + "x" * 5000):
        assert 400 <= plain_http.get(url + path).status_code < 500
    assert plain_http.get(url + "/checkpoint").status_code == 200


def test_monitor_state_is_versioned(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 2}))
    from ledger._monitor import MonitorError

    with pytest.raises(MonitorError, match="not a version 1 monitor state"):
        MonitorState.load(path)


def test_entry_bundles_hash_to_level_zero(world: dict[str, object]) -> None:
    second = Path(str(world["second"]))
    tile = (second / "tile/0/000").read_bytes()
    bundle = decode_bundle((second / TileRef(ENTRIES, 0).path).read_bytes())
    assert [hashlib.sha256(b"\x00" + e).digest() for e in bundle] == [
        tile[i : i + 32] for i in range(0, len(tile), 32)
    ]


# ---------------------------------------------------------------------- verify --log


def fake_archive(world: dict[str, object], target: Path) -> Path:
    """An archive's ledger/events.jsonl written from the world's ledger (enough for --log)."""
    (target / "ledger").mkdir(parents=True)
    with Ledger.open(Path(str(world["study"])) / "ledger.db", readonly=True) as log:
        lines = [json.dumps(e.to_json(), ensure_ascii=False) for e in log.events(end=425)]
    (target / "ledger" / "events.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    return target


def test_verify_log_checks_the_archive_is_exactly_the_published_log(
    world: dict[str, object], tmp_path: Path
) -> None:
    from verify._published import check_published_log

    archive = fake_archive(world, tmp_path / "archive")
    point(world, Path(str(world["second"])))
    url = str(world["url"])
    [check] = check_published_log(archive, url, [OWNER.vkey])
    assert check.status.value == "PASS", check.reason
    assert "exactly the archive's 425 events" in check.reason
    with science_skipped():  # a ledger alone, and only the published-log check is read
        result = CliRunner().invoke(
            main, ["verify", str(archive), "--log", url, "--json", "--trusted-key", OWNER.vkey]
        )
    found = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "published-log"]
    assert [c["status"] for c in found] == ["PASS"]
    # the older publication: another size
    point(world, Path(str(world["first"])))
    [check] = check_published_log(archive, url, [OWNER.vkey])
    assert check.status.value == "FAIL" and "has 303 events, the archive 425" in check.reason
    # an archive whose one envelope differs from the published entry
    point(world, Path(str(world["second"])))
    events = archive / "ledger" / "events.jsonl"
    lines = events.read_text("utf-8").splitlines()
    row = json.loads(lines[7])
    row["envelope"]["body"]["trial"] = "A|s9|2"
    lines[7] = json.dumps(row)
    events.write_text("\n".join(lines) + "\n", "utf-8")
    [check] = check_published_log(archive, url, [OWNER.vkey])
    assert check.status.value == "FAIL" and "Merkle root is not the root" in check.reason
