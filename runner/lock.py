"""``ledger lock`` and ``ledger amend``: turn a study folder into a locked, signed protocol.

Lock appends one ``artifact.locked`` per file (the file as a blob), then ``protocol.locked``
with the manifest, the arms, the design, the schedule's SHA-256, the trial count and the blinding
commitment, and signs a registration checkpoint. Afterwards every command that uses the study
re-hashes its files first (:func:`check_integrity`) and refuses if any changed, unless the change
was recorded with :func:`amend`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import AuthorizationError, EventSpec, Ledger, LedgerError, SigningKey, user_home
from runner._errors import StudyError as StudyError
from runner.provenance import environment as environment
from runner.schedule import commitment, schedule, schedule_bytes, schedule_sha256
from runner.spec import SpecError, Study, check_matched_controls, load_study
from runner.stimuli import StimulusError, check_image_for_api
from runner.truth import truth_problems

LEDGER_FILE = "ledger.db"
CHECKPOINT_FILE = "registration-checkpoint.txt"


@dataclass(frozen=True)
class LockResult:
    """What :func:`lock_study` wrote."""

    protocol_seq: int
    artifacts: int
    trials: int
    schedule_sha256: str
    checkpoint: str
    checkpoint_path: Path


def ledger_path(root: Path) -> Path:
    """The study's ledger file."""
    return Path(root) / LEDGER_FILE


def default_key_path(study_id: str) -> Path:
    """Where ``ledger new`` keeps a study's owner key: ``<user home>/keys/<study id>-owner.key``."""
    return user_home() / "keys" / f"{study_id}-owner.key"


def _ledger_owners(path: Path) -> set[str]:
    """The vkeys of the active owners of the ledger at ``path``."""
    with Ledger.open(path, readonly=True) as log:
        records = log.keys()
    return {r.vkey for r in records if r.role == "owner" and r.revoked_seq is None}


def _is_locked(path: Path) -> bool:
    if not path.exists():
        return False
    with Ledger.open(path, readonly=True) as log:
        return protocol_event(log) is not None


def study_owner_key(root: str | Path) -> SigningKey:
    """The owner key ``ledger new`` made for the study at ``root`` (used when no --key is given).

    The key file is named after ``[study] id`` in ``study.toml``
    (:func:`default_key_path`). Once the study has a ledger, the key must be one of the ledger's
    active owners; if the id was edited after ``ledger new`` (so the file carries the old id),
    the key directory is searched for the ledger's owner key. Raises :class:`StudyError`
    naming the file expected and the owner wanted when no key fits.
    """
    root = Path(root)
    path = ledger_path(root)
    study = load_study(root, strict=not _is_locked(path))  # a locked spec cannot change
    expected = default_key_path(study.id)
    if not path.exists():
        if expected.exists():
            return SigningKey.load(expected)
        raise StudyError(
            f"no --key given and no owner key at {expected} (named after study.id "
            f"{study.id!r} in {study.spec_path}); pass --key FILE"
        )
    owners = _ledger_owners(path)
    candidates = [expected] if expected.exists() else []
    keys_dir = expected.parent
    if keys_dir.is_dir():
        candidates += sorted(p for p in keys_dir.glob("*.key") if p != expected)
    for candidate in candidates:
        try:
            key = SigningKey.load(candidate)
        except LedgerError:
            continue
        if key.vkey in owners:
            return key
    wanted = ", ".join(sorted(v.rsplit("+", 1)[0] for v in owners)) or "none"
    found = f"{expected} is not one of them" if expected.exists() else f"no key at {expected}"
    raise StudyError(
        f"no --key given and no key in {keys_dir} is an owner of {path} (owners: {wanted}); "
        f"{found} (named after study.id {study.id!r} in {study.spec_path}); pass --key FILE"
    )


def check_writable(root: str | Path) -> None:
    """Refuse, naming what is read-only and what to do, unless the study's ledger is writable.

    For commands that write beside the ledger before they append to it (``ledger run`` takes
    its run lock first): the refusal then comes before anything is touched.
    """
    path = ledger_path(Path(root))
    if path.exists():  # without one, the command itself says how to create it
        with Ledger.open(path):
            pass


def check_origin_matches(study: Study, ledger_origin: str, path: Path) -> None:
    """Refuse, naming ``study.origin``, if the spec's origin is not the ledger's genesis origin."""
    if study.origin != ledger_origin:
        raise StudyError(
            f"{study.spec_path}: study.origin is {study.origin!r}, but {path} was created (by "
            f"'ledger new') with origin {ledger_origin!r}, and every checkpoint carries the "
            f"ledger's origin. Set origin = {ledger_origin!r} in study.toml, or, since nothing "
            f"is locked yet, delete {path} and run 'ledger lock' again to create the ledger "
            "with the new origin (or start over with 'ledger new DIR --id ID --origin ORIGIN')"
        )


def secret_path(study: Study) -> Path:
    """Where a generated blinding secret is kept: the user's directory, never the study folder."""
    tag = hashlib.sha256(study.origin.encode()).hexdigest()[:12]
    return user_home() / "secrets" / f"{study.id}-{tag}.secret"


def blinding_secret(study: Study, *, create: bool = False) -> bytes:
    """Resolve the study's blinding secret from its declared source."""
    source = study.blinding_secret
    if source.startswith("env:"):
        value = os.environ.get(source[4:])
        if not value:
            raise StudyError(f"blinding secret: environment variable {source[4:]} is not set")
        return value.encode("utf-8")
    if source.startswith("file:"):
        path = (study.root / source[5:]).resolve()
        try:
            path.relative_to(study.root.resolve())
        except ValueError:
            pass
        else:
            raise StudyError(f"blinding secret file {path} is inside the study folder, which is "
                             "archived; keep it elsewhere")
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StudyError(f"blinding secret file {path}: {exc.strerror}") from exc
    path = secret_path(study)
    if path.exists():
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    if not create:
        raise StudyError(f"blinding secret {path} does not exist (was the study locked here?)")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = os.urandom(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secret.hex() + "\n")
    return secret


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def protocol_event(log: Ledger) -> Any:
    """The ``protocol.locked`` event of a ledger, or None before lock."""
    return next(iter(log.events("protocol.locked")), None)


def validate_for_lock(study: Study) -> list[str]:
    """Every problem that stops a lock, beyond the spec's own validation.

    False matched-control claims, images the API cannot take, and a truth table that does not
    fit the parser (:func:`runner.truth.truth_problems`): a study that could not be scored.
    """
    from runner.render import Renderer

    problems = check_matched_controls(study)
    problems += truth_problems(study)
    for stim_id, path in study.stimuli.items():
        try:
            check_image_for_api(path.read_bytes(), name=f"stimulus {stim_id} ({path.name})")
        except StimulusError as exc:
            problems.append(str(exc))
    try:
        problems += Renderer(study).problems()
    except SpecError as exc:
        problems += exc.problems
    return problems


def protocol_design(study: Study) -> dict[str, Any]:
    """The members of ``protocol.locked`` that shape every request (``docs/prompts.md`` §7)."""
    from runner.items import load_items

    out: dict[str, Any] = {}
    if study.models is None:
        out["model"] = study.model
    else:
        out["models"] = {name: m.record() for name, m in study.models.items()}
        out["model_order"] = list(study.models)
    if study.item_study:
        assert study.items_path is not None
        out["items"] = study.load_items().record(study.rel(study.items_path))
    else:
        out["stimuli"] = sorted(study.stimuli)
    if study.item_study or study.prompt.item is not None:
        out["prompt"] = {
            "item": study.rel(study.prompt.item) if study.prompt.item is not None else None,
            "option_format": study.prompt.option_format,
            "option_separator": study.prompt.option_separator,
        }
    if study.fewshot:
        sets = {}
        for name, fs in study.fewshot.items():
            record = fs.record(study.rel)
            examples = load_items(fs.examples, display=study.rel(fs.examples))
            record["examples"] = examples.record(study.rel(fs.examples))
            sets[name] = record
        out["fewshot"] = sets
    return out


def lock_study(root: str | Path, key: SigningKey) -> LockResult:
    """Lock the study at ``root``: artifacts, protocol, registration checkpoint.

    Creates the study ledger with ``key`` as owner if it does not exist yet. Everything is
    validated before anything is appended; the artifacts and the protocol are one transaction.
    """
    root = Path(root)
    try:
        study = load_study(root)
    except SpecError as exc:
        count = len(exc.problems)
        if count == 1:
            raise StudyError(f"cannot lock: {exc}") from exc
        raise StudyError(f"cannot lock, the spec has {count} problems:\n{exc}") from exc
    problems = validate_for_lock(study)
    if problems:
        sep = " " if len(problems) == 1 else "\n"
        raise StudyError("cannot lock:" + sep + "\n".join(problems))
    path = ledger_path(root)
    log = (
        Ledger.open(path) if path.exists() else Ledger.create(path, origin=study.origin, key=key)
    )
    with log:
        if protocol_event(log) is not None:
            raise StudyError(f"{root} is already locked; use 'ledger amend' to record a change")
        check_origin_matches(study, log.origin, path)
        secret = blinding_secret(study, create=True)
        order = schedule(study.seed, study.trial_ids())
        files = study.locked_files()
        specs: list[EventSpec] = []
        manifest: dict[str, str] = {}
        for rel, role in files.items():
            data = (root / rel).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            manifest[rel] = digest
            specs.append(
                EventSpec(
                    "artifact.locked",
                    {"path": rel, "role": role, "sha256": digest, "size": len(data)},
                    {"content": data},
                )
            )
        digest_of_schedule = schedule_sha256(order)
        body = {
            "study": study.id,
            "title": study.title,
            "manifest": manifest,
            "arms": {
                a.id: {
                    "role": a.role,
                    "components": list(a.components),
                    "sha256": study.arm_sha256(a.id),
                    **a.protocol_record(),
                }
                for a in study.arms.values()
            },
            **protocol_design(study),
            "design": {
                "replicates": study.replicates,
                "seed": study.seed,
                "bootstrap_seed": study.bootstrap_seed,
                "bootstrap_iterations": study.bootstrap_iterations,
                "order": "ascending SHA-256(seed|trial id)",
            },
            "trials": len(order),
            "schedule_sha256": digest_of_schedule,
            "blinding_commitment": commitment(secret),
            "response": study.response_plan(),
            "hypotheses": [h.locked() for h in study.hypotheses],
            **({"deviations": [dict(d) for d in study.deviations]} if study.deviations else {}),
            "analysis": study.analysis,
            "amendable": list(study.amendable),
            "environment": environment(),
        }
        specs.append(EventSpec("protocol.locked", body, {"schedule": schedule_bytes(order)}))
        events = log.append_many(specs, key=key)
        note = log.sign_checkpoint(key)
    checkpoint_path = root / CHECKPOINT_FILE
    checkpoint_path.write_text(note, encoding="utf-8")
    return LockResult(
        events[-1].seq, len(files), len(order), digest_of_schedule, note, checkpoint_path
    )


def promised_checkpoint_sizes(log: Ledger) -> list[int]:
    """Tree sizes a checkpoint is promised at.

    Right after ``protocol.locked`` (the registration checkpoint) and right after every
    ``run.stopped`` (the end of each run session).
    """
    sizes = [event.seq + 1 for event in log.events("protocol.locked")]
    sizes += [event.seq + 1 for event in log.events("run.stopped")]
    return sorted(set(sizes))


def sign_missing_checkpoints(log: Ledger, key: SigningKey) -> list[int]:
    """Sign each promised checkpoint the ledger lacks; return the sizes signed.

    A process killed between appending ``protocol.locked`` or ``run.stopped`` and signing the
    checkpoint that follows leaves a gap the verifier's ``checkpoints`` check would report; the
    next ``ledger run`` or ``ledger export`` closes it (the checkpoint commits to the same tree
    prefix whenever it is signed). A key that was not yet valid at that size is skipped.
    """
    have = {cp.size for cp in log.checkpoints()}
    signed = []
    for size in promised_checkpoint_sizes(log):
        if size in have:
            continue
        try:
            log.sign_checkpoint(key, size=size)
        except AuthorizationError:
            continue
        signed.append(size)
    return signed


def locked_manifest(log: Ledger) -> dict[str, str]:
    """The manifest as locked, updated by every recorded amendment."""
    event = protocol_event(log)
    if event is None:
        raise StudyError(f"{log.path}: the study is not locked yet (run 'ledger lock')")
    manifest: dict[str, str] = dict(event.body["manifest"])
    for amendment in log.events("protocol.amended"):
        for change in amendment.body["changes"]:
            manifest[change["path"]] = change["sha256"]
    return manifest


def changed_files(root: Path, log: Ledger) -> list[tuple[str, str, str | None]]:
    """(path, locked hash, current hash or None if missing) for every file that changed."""
    out: list[tuple[str, str, str | None]] = []
    for rel, digest in sorted(locked_manifest(log).items()):
        path = root / rel
        current = _sha256(path) if path.is_file() else None
        if current != digest:
            out.append((rel, digest, current))
    return out


def check_integrity(root: str | Path) -> Study:
    """Re-hash every locked file; refuse, naming each changed file, unless all match."""
    root = Path(root)
    path = ledger_path(root)
    if not path.exists():
        raise StudyError(f"{root}: no ledger ({LEDGER_FILE}); run 'ledger new' and 'ledger lock'")
    with Ledger.open(path, readonly=True) as log:
        changes = changed_files(root, log)
    if changes:
        lines = [
            f"  {rel}: locked {old}, now {new or 'missing'}" for rel, old, new in changes
        ]
        raise StudyError(
            f"{root}: {len(changes)} locked file(s) changed since lock:\n" + "\n".join(lines)
            + "\nrestore them, or record a deliberate change with 'ledger amend --reason'"
        )
    return load_study(root, strict=False)  # locked as it is: strict at lock, never again


def amend(root: str | Path, key: SigningKey, reason: str) -> int:
    """Record changed amendable files as a ``protocol.amended`` deviation; return its seq."""
    root = Path(root)
    if not reason.strip():
        raise StudyError("an amendment needs a reason (--reason)")
    with Ledger.open(ledger_path(root)) as log:
        event = protocol_event(log)
        if event is None:
            raise StudyError(f"{root} is not locked; nothing to amend")
        changes = changed_files(root, log)
        if not changes:
            raise StudyError(f"{root}: no locked file has changed; nothing to amend")
        patterns = event.body.get("amendable", [])
        refused = [
            rel for rel, _, _ in changes if not any(fnmatch.fnmatch(rel, p) for p in patterns)
        ]
        if refused:
            raise StudyError(
                "these files may not change after lock (not listed in study.amendable): "
                + ", ".join(refused)
            )
        missing = [rel for rel, _, new in changes if new is None]
        if missing:
            raise StudyError(f"cannot amend deleted files: {', '.join(missing)}")
        blobs = {f"file{i}": (root / rel).read_bytes() for i, (rel, _, _) in enumerate(changes)}
        body = {
            "reason": reason,
            "changes": [
                {"path": rel, "previous_sha256": old, "sha256": new, "blob": f"file{i}"}
                for i, (rel, old, new) in enumerate(changes)
            ],
        }
        return log.append("protocol.amended", body, key=key, blobs=blobs).seq
