"""Studies that use witnesses (issue 20, docs/witness.md §8): the spec sections, lock and run
getting cosignatures from a real witness served over HTTP on 127.0.0.1, the archive's trust
policy, ``verify --witness``, and the fork attack caught end to end.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import STUDY_ORIGIN, study_key

from ledger import Ledger, SigningKey
from ledger.cli import main
from ledger.witness import CosignerVerifier, Witness
from ledger.witness_server import LocalWitness
from runner.spec import SpecError, load_study

W1 = "witness.example/w1"
W2 = "witness.example/w2"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("witnessed-home")
    old = os.environ.get("PROMPT_LEDGER_HOME")
    os.environ["PROMPT_LEDGER_HOME"] = str(base / "home")
    key = study_key()
    key_file = base / "home" / "keys" / "prompt-tumbling-e-owner.key"
    key_file.parent.mkdir(parents=True)
    key.save(key_file)
    yield base
    if old is None:
        os.environ.pop("PROMPT_LEDGER_HOME", None)
    else:
        os.environ["PROMPT_LEDGER_HOME"] = old


@pytest.fixture(scope="module")
def template(home: Path) -> Path:
    """A tumbling-E study with one replicate per arm and probe, not locked (no ledger)."""
    from runner._new import new_study

    root = home / "template"
    new_study(root, "prompt-tumbling-e", study_key())
    (root / "ledger.db").unlink()
    spec = root / "study.toml"
    text = spec.read_text("utf-8").replace("replicates = 30", "replicates = 1")
    spec.write_text(
        text.replace("bootstrap_iterations = 10000", "bootstrap_iterations = 100"), "utf-8"
    )
    return root


def new_witness(directory: Path, name: str, key: SigningKey) -> str:
    with Witness.init(directory, name) as w:
        w.add_log(STUDY_ORIGIN, [key.vkey])
        return w.key.vkey


def witnessed_study(
    template: Path, root: Path, witnesses: list[tuple[str, str, str]], **witnessing: object
) -> Path:
    """Copy the template to ``root`` and declare ``witnesses`` (name, vkey, url) in its spec."""
    shutil.copytree(template, root)
    with Ledger.create(root / "ledger.db", origin=STUDY_ORIGIN, key=study_key()):
        pass
    spec = root / "study.toml"
    text = spec.read_text("utf-8")
    for name, vkey, url in witnesses:
        text += f'\n[[witnesses]]\nname = "{name}"\nvkey = "{vkey}"\nurl = "{url}"\n'
    if witnessing:
        text += "\n[witnessing]\n" + "".join(
            f"{k} = {json.dumps(v)}\n" for k, v in witnessing.items()
        )
    spec.write_text(text, "utf-8")
    return root


def run(root: Path) -> object:
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study

    return run_study(root, study_key(), SimulatedBackend(), RunOptions(concurrency=2))


def export(root: Path, target: Path) -> Path:
    """Score, unblind, analyse and export the study at ``root`` to ``target``."""
    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study

    key = study_key()
    score_study(root, key)
    unblind_study(root, key)
    analyze_study(root, key)
    export_study(root, target, key)
    return target


def checks(archive: Path, *args: str) -> dict[str, dict[str, object]]:
    result = CliRunner().invoke(main, ["verify", str(archive), "--json", *args])
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def cosigners(note: str, vkeys: list[str]) -> list[str]:
    text, _, block = note.partition("\n\n")
    found = []
    for vkey in vkeys:
        verifier = CosignerVerifier.parse(vkey)
        if any(
            verifier.verify_line(text + "\n", line) is not None
            for line in block.splitlines(keepends=True)
            if line.split(" ")[1] == verifier.name
        ):
            found.append(verifier.name)
    return found


# ----------------------------------------------------------------------- the spec


GOOD_VKEY = CosignerVerifier(W1, bytes(range(32))).vkey
TWIN_VKEY = CosignerVerifier(W2, bytes(range(32))).vkey  # the same key under another name


@pytest.mark.parametrize(
    ("name", "addition", "message"),
    [
        (
            "witnessing_without_witnesses",
            "[witnessing]\nquorum = 1\n",
            "witnessing: declares how witnesses are used, but there is no [[witnesses]] entry",
        ),
        (
            "quorum_above_witnesses",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://127.0.0.1:1"\n'
            "[witnessing]\nquorum = 2\n",
            "witnessing.quorum: must be an integer from 1 to 1",
        ),
        (
            "ledger_key_as_witness_key",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{study_key().vkey}"\nurl = "http://h"\n',
            "witnesses[0].vkey: witness vkey",
        ),
        (
            "name_not_the_vkeys",
            f'[[witnesses]]\nname = "other"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n',
            "witnesses[0].name: 'other' is not the name in its vkey",
        ),
        (
            "url_not_http",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "ftp://h"\n',
            "witnesses[0].url: 'ftp://h' is not an http(s) URL",
        ),
        (
            "missing_url",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\n',
            "witnesses[0].url: must be a non-empty string",
        ),
        (
            "unknown_key_in_witness",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\nuri = "x"\n',
            "[[witnesses]] #1 uri: unknown key (did you mean 'url'?)",
        ),
        (
            "unknown_key_in_witnessing",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n'
            "[witnessing]\nquorom = 1\n",
            "did you mean 'quorum'?",
        ),
        (
            "unreachable_policy",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n'
            '[witnessing]\nunreachable = "ignore"\n',
            "witnessing.unreachable: must be 'wait'",
        ),
        (
            "negative_interval",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n'
            "[witnessing]\ninterval_trials = -1\n",
            "witnessing.interval_trials: must be an",
        ),
        (
            "witness_twice",
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n'
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://i"\n',
            "witnesses[1].name: witness 'witness.example/w1' is listed twice",
        ),
        (
            "one_key_under_two_names",  # issue 32: it would count twice toward a quorum
            f'[[witnesses]]\nname = "{W1}"\nvkey = "{GOOD_VKEY}"\nurl = "http://h"\n'
            f'[[witnesses]]\nname = "{W2}"\nvkey = "{TWIN_VKEY}"\nurl = "http://i"\n',
            "witnesses[1].vkey: is the key of witness 'witness.example/w1' under another name",
        ),
    ],
)
def test_bad_witness_sections_are_refused_naming_the_field(
    template: Path, tmp_path: Path, name: str, addition: str, message: str
) -> None:
    root = tmp_path / name
    shutil.copytree(template, root, ignore=shutil.ignore_patterns("stimuli"))
    spec = root / "study.toml"
    spec.write_text(spec.read_text("utf-8") + "\n" + addition, "utf-8")
    with pytest.raises(SpecError) as info:
        load_study(root)
    problems = [p for p in info.value.problems if "stimuli" not in p]
    assert any(message in p and str(spec) in p for p in problems), problems


def test_a_good_witness_section_is_parsed_with_its_line(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "good"
    shutil.copytree(template, root)
    spec = root / "study.toml"
    spec.write_text(
        spec.read_text("utf-8") + f'\n[[witnesses]]\nname = "{W1}"\nvkey = '
        f'"{GOOD_VKEY}"\nurl = "http://127.0.0.1:7380/"\n',
        "utf-8",
    )
    study = load_study(root)
    assert study.witnessing is not None
    assert study.witnessing.quorum == 1 and study.witnessing.unreachable == "wait"
    assert study.witnessing.witnesses[0].url == "http://127.0.0.1:7380"


# ----------------------------------------------------------------------- a witnessed study


@dataclass
class Witnessed:
    root: Path
    vkeys: list[str]
    witness_dirs: list[Path]
    archive: Path = Path()


@pytest.fixture(scope="module")
def witnessed(home: Path, template: Path) -> Iterator[Witnessed]:
    """Two witnesses, quorum 2, cosigning every 10 trials: locked and run."""
    key = study_key()
    dirs = [home / "w1", home / "w2"]
    vkeys = [new_witness(dirs[0], W1, key), new_witness(dirs[1], W2, key)]
    with LocalWitness(dirs[0]) as one, LocalWitness(dirs[1]) as two:
        root = witnessed_study(
            template,
            home / "study",
            [(W1, vkeys[0], one.url), (W2, vkeys[1], two.url)],
            quorum=2,
            interval_trials=10,
        )
        from runner._lock import lock_study

        lock_study(root, key)
        run(root)
    yield Witnessed(root, vkeys, dirs)


@pytest.fixture(scope="module")
def exported(witnessed: Witnessed, home: Path) -> Witnessed:
    """The witnessed study scored, analysed and exported (slow: the analysis)."""
    if not witnessed.archive.name:
        witnessed.archive = export(witnessed.root, home / "archive")
    return witnessed


def test_lock_and_every_session_checkpoint_are_cosigned(witnessed: Witnessed) -> None:
    from runner._witnessing import promised_sizes

    published = (witnessed.root / "registration-checkpoint.txt").read_text("utf-8")
    assert cosigners(published, witnessed.vkeys) == [W1, W2]
    with Ledger.open(witnessed.root / "ledger.db", readonly=True) as log:
        promised = promised_sizes(log)
        notes = {cp.size: cp.note for cp in log.checkpoints()}
        started = [e.seq for e in log.events("run.started")]
        first_request = next(iter(log.events("trial.requested"))).seq
        finals = [
            e.seq
            for e in log.events()
            if e.kind == "trial.responded" or (e.kind == "trial.failed" and e.body["final"])
        ]
    # issue 32: the interval checkpoints are exactly the trees after the 10th, 20th, ... final
    # outcome of the session (derived from the trials, as the verifier derives them)
    intervals = [seq + 1 for seq in finals[9::10]]
    assert intervals and [size for size, what in promised if what.startswith("interval")] == (
        intervals
    )
    assert [what.split(" (")[0].split(" of ")[0].rstrip("0123456789 ") for _, what in promised] == [
        "registration",
        "session start",
        *["interval"] * len(intervals),
        "session stop",
    ]
    for size, what in promised:
        assert cosigners(notes[size], witnessed.vkeys) == [W1, W2], what
    assert started[0] + 1 <= first_request  # the start checkpoint precedes every request


@pytest.mark.slow
def test_the_archive_carries_the_locked_trust_policy(exported: Witnessed) -> None:
    policy = json.loads((exported.archive / "ledger/witnesses.json").read_text("utf-8"))
    assert [w["vkey"] for w in policy["witnesses"]] == exported.vkeys
    assert policy["quorum"] == 2 and policy["unreachable"] == "wait"


@pytest.mark.slow
def test_verify_with_the_witness_keys_reports_when_it_was_locked(exported: Witnessed) -> None:
    result = CliRunner().invoke(
        main,
        [
            "verify",
            str(exported.archive),
            "--witness",
            exported.vkeys[0],
            "--witness",
            exported.vkeys[1],
            "--quorum",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output  # (the table wraps its text: read the JSON)
    found = checks(
        exported.archive, "--witness", exported.vkeys[0], "--witness", exported.vkeys[1]
    )["witnesses"]
    assert found["status"] == "PASS", found
    reason = str(found["reason"])
    promised = 3 + len(interval_sizes(exported.archive, 10))  # lock, start, stop, intervals
    assert f"{promised} promised checkpoint(s) carry 2 of 2 witness cosignatures" in reason
    assert "locked no later than" in reason
    assert f"witnessed by {W1}, {W2}" in reason or f"witnessed by {W2}, {W1}" in reason
    own = checks(exported.archive)["witnesses"]  # the archive's own policy: owner-chosen keys
    assert own["status"] == "WARN" and "pass --witness" in str(own["reason"])


def interval_sizes(archive: Path, every: int) -> list[int]:
    """The tree sizes after every ``every``-th final trial outcome of the archive's one session."""
    events = [
        json.loads(line)["envelope"]
        for line in (archive / "ledger" / "events.jsonl").read_bytes().splitlines()
    ]
    finals = [
        e["seq"]
        for e in events
        if e["kind"] == "trial.responded" or (e["kind"] == "trial.failed" and e["body"]["final"])
    ]
    return [seq + 1 for seq in finals[every - 1 :: every]]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["cosignatures-stripped", "file-deleted"])
def test_an_interval_checkpoint_without_its_cosignatures_fails(
    exported: Witnessed, tmp_path: Path, how: str
) -> None:
    """Issue 32: the locked interval_trials promise is derived from the trials themselves;
    stripping one interval checkpoint's cosignatures, or deleting its file, fails."""
    from tests.verify.test_archive_tamper import rewrite_manifest

    copy = tmp_path / "archive"
    shutil.copytree(exported.archive, copy)
    size = interval_sizes(copy, 10)[0]
    note = copy / "ledger" / "checkpoints" / f"{size:08d}.txt"
    if how == "file-deleted":
        note.unlink()
    else:
        text, _, lines = note.read_text("utf-8").partition("\n\n")
        note.write_text(text + "\n\n" + lines.splitlines(keepends=True)[0], "utf-8")
    rewrite_manifest(copy)
    found = checks(copy, "--witness", exported.vkeys[0], "--witness", exported.vkeys[1])
    assert found["witnesses"]["status"] == "FAIL", found["witnesses"]
    assert f"{size:08d}.txt: the interval checkpoint 1" in str(found["witnesses"]["reason"])
    assert "of the 2 required" in str(found["witnesses"]["reason"])


@pytest.mark.slow
def test_verify_with_a_witness_that_never_cosigned_fails(exported: Witnessed) -> None:
    stranger = CosignerVerifier("witness.example/stranger", bytes(32)).vkey
    found = checks(exported.archive, "--witness", stranger)["witnesses"]
    assert found["status"] == "FAIL"
    assert "registration checkpoint" in str(found["reason"])
    assert "0 valid cosignature(s) of the 1 required" in str(found["reason"])


@pytest.mark.slow
def test_a_policy_file_that_is_not_the_locked_one_fails(
    exported: Witnessed, tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(exported.archive, copy)
    path = copy / "ledger/witnesses.json"
    policy = json.loads(path.read_text("utf-8"))
    policy["quorum"] = 1
    path.write_text(json.dumps(policy), "utf-8")
    found = checks(copy, "--witness", exported.vkeys[0])["witnesses"]
    assert found["status"] == "FAIL"
    assert "differs from the witnessing that protocol.locked" in str(found["reason"])


@pytest.mark.slow
def test_a_forged_cosignature_fails(exported: Witnessed, tmp_path: Path) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(exported.archive, copy)
    checkpoint = sorted((copy / "ledger/checkpoints").iterdir())[0]
    lines = checkpoint.read_text("utf-8").splitlines(keepends=True)
    w1 = next(i for i, line in enumerate(lines) if line.startswith(f"\u2014 {W1} "))
    blob = bytearray(__import__("base64").b64decode(lines[w1].split(" ")[2]))
    blob[-1] ^= 1
    lines[w1] = f"\u2014 {W1} {__import__('base64').b64encode(bytes(blob)).decode()}\n"
    checkpoint.write_text("".join(lines), "utf-8")
    found = checks(copy, "--witness", exported.vkeys[0])["witnesses"]
    assert found["status"] == "FAIL"
    assert f"the cosignature of {W1} does not verify" in str(found["reason"])


@pytest.mark.slow
def test_the_fork_attack_is_caught_by_the_runner_the_witness_and_the_verifier(
    home: Path, template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock and witness, run and witness, copy the ledger back to the registration point, run
    again: the witness refuses, ``ledger run`` stops with its answer, the evidence command prints
    both checkpoints; and the second branch, run to the end by a runner altered to skip the
    witnesses, exports an archive that fails ``verify --witness``."""
    import runner._execute
    from runner._lock import lock_study

    def restore() -> None:
        for suffix in ("-wal", "-shm"):
            (root / f"ledger.db{suffix}").unlink(missing_ok=True)
        shutil.copyfile(registration_point, root / "ledger.db")

    key = study_key()
    vkey = new_witness(tmp_path / "w", W1, key)
    with LocalWitness(tmp_path / "w") as served:
        root = witnessed_study(template, tmp_path / "study", [(W1, vkey, served.url)])
        lock_study(root, key)
        registration_point = tmp_path / "registration.db"
        shutil.copyfile(root / "ledger.db", registration_point)
        run(root)  # the first branch: witnessed throughout
        first = export(root, tmp_path / "first")
        restore()  # the owner dislikes the result and goes back to the registration point
        result = CliRunner().invoke(main, ["run", str(root), "--backend", "simulated"])
    assert result.exit_code == 1, result.output
    assert f"witness {W1} ({served.url}) refused" in result.output
    assert "HTTP 409" in result.output and "not the history the witness cosigned" in result.output
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("trial.requested"))  # nothing was sent on the second branch
        stopped = list(log.events("run.stopped"))
    assert len(stopped) == 1 and stopped[0].body["reason"].startswith("witness: ")

    evidence = CliRunner().invoke(main, ["witness", "evidence", str(tmp_path / "w")])
    assert evidence.exit_code == 1, evidence.output
    assert f"FORK PROVEN: {STUDY_ORIGIN}" in evidence.output
    assert evidence.output.count(f"    {STUDY_ORIGIN}") == 2  # both checkpoints, printed

    restore()  # and runs the second branch with a runner that skips the witnesses
    monkeypatch.setattr(runner._execute, "session_witnesses", lambda log: None)
    run(root)
    second = export(root, tmp_path / "second")
    assert checks(first, "--witness", vkey)["witnesses"]["status"] == "PASS"
    found = checks(second, "--witness", vkey)["witnesses"]
    assert found["status"] == "FAIL"
    assert "session start checkpoint" in str(found["reason"])
    verdict = CliRunner().invoke(main, ["verify", str(second), "--witness", vkey])
    assert verdict.exit_code == 1

    # issue 32: the owner also deletes run.started and run.stopped (whose checkpoints the
    # witness would have had to cosign) and re-signs the rest with the owner key, keeping the
    # registration checkpoint as the witness cosigned it: the trials lie outside every session
    from tests.verify.test_archive_tamper import resign

    events = [
        json.loads(line)["envelope"]
        for line in (second / "ledger" / "events.jsonl").read_bytes().splitlines()
    ]
    kept = [e for e in events if e["kind"] not in ("run.started", "run.stopped")]
    registration = next(e["seq"] for e in events if e["kind"] == "protocol.locked") + 1
    stripped = tmp_path / "stripped"
    shutil.copytree(second, stripped)
    resign(stripped, kept, key=key)
    name = f"ledger/checkpoints/{registration:08d}.txt"
    shutil.copyfile(second / name, stripped / name)  # the registration tree is unchanged
    for args in (["--witness", vkey, "--trusted-key", key.vkey], []):
        found = checks(stripped, *args)
        assert found["outcomes"]["status"] == "FAIL", found["outcomes"]
        assert "lies outside every run session" in str(found["outcomes"]["reason"])
        verdict = CliRunner().invoke(main, ["verify", str(stripped), *args])
        assert verdict.exit_code == 1, verdict.output


def test_an_unreachable_witness_stops_the_run_before_any_request(
    home: Path, template: Path, tmp_path: Path
) -> None:
    from runner._lock import lock_study
    from runner._witnessing import WitnessUnavailable

    key = study_key()
    vkey = new_witness(tmp_path / "w", W1, key)
    root = witnessed_study(
        template, tmp_path / "study", [(W1, vkey, "http://127.0.0.1:9")], retry_seconds=0.3
    )
    with pytest.raises(WitnessUnavailable, match="locked, but the registration checkpoint"):
        lock_study(root, key)
    with pytest.raises(WitnessUnavailable, match=r"stayed unreachable for 0\.3 s") as info:
        run(root)
    assert "nothing more was sent" in str(info.value)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert list(log.events("protocol.locked"))  # the lock stands
        assert not list(log.events("trial.requested"))
    # once the witness is back, the next run gets every promised checkpoint cosigned first
    with LocalWitness(tmp_path / "w") as served:
        spec = root / "study.toml"
        assert "http://127.0.0.1:9" in spec.read_text("utf-8")
        import runner._witnessing as witnessing

        policy = witnessing.WitnessPolicy((witnessing.WitnessSpec(W1, vkey, served.url),), 1)
        with Ledger.open(root / "ledger.db") as log, witnessing.Cosigner(log, key, policy) as c:
            outcomes = c.witness_promised()
        assert [o.witnessed for o in outcomes] == [True, True, True]


def test_an_unreachable_witness_pauses_the_run_and_it_goes_on_once_the_witness_answers(
    home: Path, template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The witness is down when the session starts: the runner retries with back-off and sends
    nothing; once the witness listens again (a second later) the session-start checkpoint is
    cosigned, and only then are trials requested."""
    import socket
    import threading

    from runner._lock import lock_study

    key = study_key()
    vkey = new_witness(tmp_path / "w", W1, key)
    with socket.socket() as probe:  # a free port, for the witness to come back on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = witnessed_study(
        template, tmp_path / "study", [(W1, vkey, f"http://127.0.0.1:{port}")], retry_seconds=60
    )
    with LocalWitness(tmp_path / "w", port=port):
        lock_study(root, key)
    back: list[LocalWitness] = []
    timer = threading.Timer(
        1.0, lambda: back.append(LocalWitness(tmp_path / "w", port=port).start())
    )
    import runner._execute

    original = runner._execute.Runner._witness_start

    async def start_then_witness(self: runner._execute.Runner, loop: object) -> None:
        timer.start()  # the witness comes back one second after the session asks for it
        await original(self, loop)  # type: ignore[arg-type]

    monkeypatch.setattr(runner._execute.Runner, "_witness_start", start_then_witness)
    try:
        result = run(root)
    finally:
        timer.join()
        for witness in back:
            witness.stop()
    assert result.witness_wait >= 0.5  # type: ignore[attr-defined]
    assert result.pending == 0  # type: ignore[attr-defined]
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        (started,) = list(log.events("run.started"))
        notes = {cp.size: cp.note for cp in log.checkpoints()}
        first_request = next(iter(log.events("trial.requested")))
    assert cosigners(notes[started.seq + 1], [vkey]) == [W1]
    stamp = CosignerVerifier.parse(vkey).verify_line(
        notes[started.seq + 1].partition("\n\n")[0] + "\n",
        notes[started.seq + 1].splitlines(keepends=True)[-1],
    )
    assert stamp is not None
    import datetime as dt

    requested = dt.datetime.strptime(first_request.time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.UTC
    )  # the writer's clock, as the cosignature's time is the witness's
    assert int(requested.timestamp()) >= stamp


def test_a_witness_that_refuses_stops_the_run_with_its_answer(
    home: Path, template: Path, tmp_path: Path
) -> None:
    """A witness that does not know the study's log answers 404: the lock stands unwitnessed,
    and ``ledger run`` records run.stopped with the witness's answer and sends nothing."""
    from runner._lock import lock_study
    from runner._witnessing import WitnessRefusal

    with Witness.init(tmp_path / "w", W1) as w:  # no add-log: the study's log is unknown
        vkey = w.key.vkey
    with LocalWitness(tmp_path / "w") as served:
        root = witnessed_study(template, tmp_path / "study", [(W1, vkey, served.url)])
        with pytest.raises(WitnessRefusal, match="HTTP 404: unknown log origin"):
            lock_study(root, study_key())
        result = CliRunner().invoke(main, ["run", str(root), "--backend", "simulated"])
    assert result.exit_code == 1
    assert f"witness {W1} ({served.url}) refused the checkpoint" in result.output
    assert "HTTP 404: unknown log origin" in result.output
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("trial.requested"))
        (stopped,) = list(log.events("run.stopped"))
    assert stopped.body["reason"].startswith("witness: ") and "404" in stopped.body["reason"]


@pytest.mark.slow
def test_a_study_that_may_continue_unwitnessed_says_so_in_the_archive(
    home: Path, template: Path, tmp_path: Path
) -> None:
    from runner._lock import lock_study

    key = study_key()
    vkey = new_witness(tmp_path / "w", W1, key)
    root = witnessed_study(
        template,
        tmp_path / "study",
        [(W1, vkey, "http://127.0.0.1:9")],
        unreachable="continue",
        retry_seconds=0,
    )
    lock_study(root, key)
    result = run(root)
    assert result.final == result.final + result.pending  # type: ignore[attr-defined]
    assert result.unwitnessed  # type: ignore[attr-defined]
    archive = export(root, tmp_path / "archive")
    found = checks(archive, "--witness", vkey)["witnesses"]
    assert found["status"] == "WARN"
    assert "the study declared it may continue unwitnessed" in str(found["reason"])


# ----------------------------------------------------------------------- ML-DSA-44


def test_ml_dsa_44_cosignatures_verify_in_the_writer_and_the_verifier(tmp_path: Path) -> None:
    """tlog-cosignature 1.1: a witness signing with ML-DSA-44 (key type 0x06, the subtree/v1
    message); its cosignature verifies with ledger.witness and, independently, with verify/."""
    from ledger.witness import ALG_COSIGNATURE_MLDSA44, format_request
    from verify._note import parse_note
    from verify._witness import parse_cosigner_vkey

    key = study_key()
    result = CliRunner().invoke(
        main, ["witness", "init", str(tmp_path / "w"), "--name", W2, "--algorithm", "ml-dsa-44"]
    )
    assert result.exit_code == 0, result.output
    vkey = result.stdout.strip()
    verifier = CosignerVerifier.parse(vkey)
    assert verifier.alg == ALG_COSIGNATURE_MLDSA44 and len(verifier.public_key) == 1312
    with Ledger.create(tmp_path / "log.db", origin=STUDY_ORIGIN, key=key) as log:
        log.append(
            "artifact.locked", {"path": "a", "role": "spec", "sha256": "0" * 64, "size": 0}, key=key
        )
        note = log.sign_checkpoint(key)
    with Witness.open(tmp_path / "w") as witness:
        witness.add_log(STUDY_ORIGIN, [key.vkey])
        answer = witness.add_checkpoint(format_request(0, [], note))
    assert answer.status == 200, answer.body
    text = note.partition("\n\n")[0] + "\n"
    stamp = verifier.verify_line(text, answer.body)
    assert stamp is not None and stamp > 0
    cosigned = note + answer.body
    parsed_text, sigs = parse_note(cosigned)
    independent = parse_cosigner_vkey(vkey)
    assert [independent.verify(parsed_text, s) for s in sigs] == [None, stamp]
    forged = bytearray(sigs[1].signature)
    forged[-1] ^= 1
    with pytest.raises(ValueError, match="does not verify"):
        independent.verify(parsed_text, type(sigs[1])(sigs[1].name, sigs[1].key_id, bytes(forged)))
    # a study can declare an ML-DSA-44 witness like any other
    from runner._witnessing import parse_policy

    problems: list[str] = []
    policy = parse_policy(
        {"witnesses": [{"name": W2, "vkey": vkey, "url": "http://h"}]},
        lambda field, message: problems.append(f"{field}: {message}"),
    )
    assert not problems and policy is not None and policy.witnesses[0].vkey == vkey


def test_the_specs_example_cosigned_checkpoint_reads_with_the_verifiers_note_code() -> None:
    """c2sp.org/tlog-cosignature's example note: the verifier's own note parser reads it, and
    the cosignature's timestamp is the one of the spec's example signed message (1679315147).
    The spec publishes no key for witness.example.com/w1, so the signature itself cannot be
    checked; a key of that name that is not the witness's ignores or refuses the line."""
    from verify._note import parse_note
    from verify._witness import parse_cosigner_vkey

    example = (
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
        "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URY"
        "N7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
        "\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dl"
        "rDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
    )
    text, sigs = parse_note(example)
    assert text.splitlines() == [
        "example.com/behind-the-sofa",
        "20852163",
        "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=",
    ]
    cosignature = sigs[1]
    assert cosignature.name == "witness.example.com/w1"
    assert len(cosignature.signature) == 8 + 64  # timestamped_signature, Ed25519
    assert int.from_bytes(cosignature.signature[:8], "big") == 1679315147
    other = parse_cosigner_vkey(CosignerVerifier("witness.example.com/w1", bytes(32)).vkey)
    assert other.verify(text, cosignature) is None  # another key id: ignored, as MUST
