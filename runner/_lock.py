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

from ledger import (
    AuthorizationError,
    EventSpec,
    Ledger,
    LedgerError,
    PostgresLocation,
    RemoteLocation,
    SigningKey,
    study_ledger,
    user_home,
)
from runner._arm_identity import (
    ARM_IDENTITY_VERSION,
    identity_object,
    identity_sha256,
    identity_version,
)
from runner._errors import StudyError as StudyError
from runner._osf import OSF_FILE, OSF_ROLE, osf_preregistration
from runner._phases import (
    GROWABLE_ROLES,
    locked_bytes,
    merge_hypotheses,
    phase_of,
    plan_problems,
    protocol_events,
)
from runner._plancheck import PlanCheck, check_recorded_plan
from runner._planspec import PLAN_FILE
from runner._privacy import privacy_record
from runner._provenance import environment as environment
from runner._schedule import commitment, schedule, schedule_bytes, schedule_sha256
from runner._stimuli import StimulusError, check_image_for_api
from runner._timestamping import TimestampSpec, timestamp_checkpoint
from runner._truth import truth_problems
from runner._witnessing import witness_registration
from runner.spec import SpecError, Study, check_matched_controls, load_study

LEDGER_FILE = "ledger.db"
STORE_FILE = "ledger.store"
"""A study whose ledger lives on PostgreSQL holds, instead of ``ledger.db``, this one-line file:
the store's URL with its schema and without a password (``docs/storage.md``)."""
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
    warnings: tuple[str, ...] = ()
    """Design warnings (:meth:`runner.spec.Study.replication_warnings`): locked all the same."""


def ledger_path(root: Path) -> Path | PostgresLocation | RemoteLocation:
    """Where the study's ledger lives: ``ledger.db``, or the store ``ledger.store`` names.

    Raises :class:`StudyError` naming ``ledger.store`` when it cannot be read or holds no
    valid PostgreSQL URL (or a password).
    """
    try:
        return study_ledger(Path(root))
    except LedgerError as exc:
        raise StudyError(str(exc)) from exc


def default_key_path(study_id: str) -> Path:
    """Where ``ledger new`` keeps a study's owner key: ``<user home>/keys/<study id>-owner.key``."""
    return user_home() / "keys" / f"{study_id}-owner.key"


def _ledger_owners(path: Path | PostgresLocation | RemoteLocation) -> set[str]:
    """The vkeys of the active owners of the ledger at ``path``."""
    with Ledger.open(path, readonly=True) as log:
        records = log.keys()
    return {r.vkey for r in records if r.role == "owner" and r.revoked_seq is None}


def _is_locked(path: Path | PostgresLocation | RemoteLocation) -> bool:
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


def check_origin_matches(
    study: Study, ledger_origin: str, path: Path | PostgresLocation | RemoteLocation
) -> None:
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
            raise StudyError(
                f"blinding secret file {path} is inside the study folder, which is "
                "archived; keep it elsewhere"
            )
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
    """The ``protocol.locked`` event in force (the latest phase's), or None before lock.

    A study locked in phases (``docs/study-spec.md``, "Phases") has one ``protocol.locked``
    per phase; each later one holds the whole plan (every earlier phase's arms, hypotheses and
    files unchanged, plus the new phase's) and the whole schedule, the earlier phases' trials
    first.
    """
    latest = None
    for event in log.events("protocol.locked"):
        latest = event
    return latest


def validate_for_lock(study: Study) -> list[str]:
    """Every problem that stops a lock, beyond the spec's own validation.

    False matched-control claims, images the API cannot take, and a truth table that does not
    fit the parser (:func:`runner._truth.truth_problems`): a study that could not be scored.
    """
    from runner._render import Renderer

    problems = check_matched_controls(study)
    problems += truth_problems(study)
    for stim_id, path in study.stimuli.items():
        try:
            check_image_for_api(path.read_bytes(), name=f"stimulus {stim_id} ({path.name})")
        except StimulusError as exc:
            problems.append(str(exc))
    try:
        renderer = Renderer(study)
        problems += renderer.problems()
        if study.steps:
            from runner.steps._render import StepRenderer

            problems += StepRenderer(study, renderer).problems()
    except SpecError as exc:
        problems += exc.problems
    return problems


def _model_design(study: Study) -> dict[str, Any]:
    """``model`` (a ``[model]`` study) or ``models`` and ``model_order``."""
    if study.models is None:
        return {"model": study.model}
    return {
        "models": {name: m.record() for name, m in study.models.items()},
        "model_order": list(study.models),
    }


def _stimulus_design(study: Study) -> dict[str, Any]:
    """``items`` (with ``prompt``) or ``stimuli`` (with ``prompt`` if it has an item template)."""
    out: dict[str, Any] = {}
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
    return out


def protocol_design(study: Study) -> dict[str, Any]:
    """The members of ``protocol.locked`` that shape every request (``docs/prompts.md`` §7)."""
    from runner._items import load_items

    out: dict[str, Any] = {**_model_design(study), **_stimulus_design(study)}
    if study.fewshot:
        sets = {}
        for name, fs in study.fewshot.items():
            record = fs.record(study.rel)
            examples = load_items(fs.examples, display=study.rel(fs.examples))
            record["examples"] = examples.record(study.rel(fs.examples))
            sets[name] = record
        out["fewshot"] = sets
    if study.steps:  # docs/prompts.md §8: everything that shapes a step request
        out["steps"] = {name: spec.record(study.rel) for name, spec in study.steps.items()}
    if study.factors:  # docs/study-spec.md "Factors": every level's edit, texts inline
        out["factors"] = {name: f.record(study.rel) for name, f in study.factors.items()}
    if study.factorial is not None:
        out["factorial"] = study.factorial.record()
    if study.variants:  # docs/variants.md: definitions and the expanded variant order
        out["variants"] = {spec.name: spec.record() for spec in study.variants}
        out["variant_order"] = [v.name for v in study.variant_list()]
    return out


def _arm_records(study: Study) -> dict[str, dict[str, Any]]:
    """Each arm's ``protocol.locked`` record without its ``sha256``."""
    return {
        a.id: {"role": a.role, "components": list(a.components), **a.protocol_record()}
        for a in study.arms.values()
    }


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def arm_identities(study: Study, body: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each arm's identity object (``docs/prompts.md`` §3.1), from the study's files.

    ``body`` is the ``protocol.locked`` body to read the records from (default: the arms'
    records and :func:`protocol_design` of ``study``, as a lock would write them).
    """
    if body is None:
        body = {"arms": _arm_records(study), **protocol_design(study)}

    def component(name: str) -> str | None:
        path = study.components.get(name)
        return None if path is None else _file_sha256(path)

    def file(rel: str) -> str:
        return _file_sha256(study.root / rel)

    return {arm: identity_object(body, arm, component, file) for arm in body["arms"]}


def arm_hashes(study: Study, version: int = ARM_IDENTITY_VERSION) -> dict[str, str]:
    """Each arm's hash (``arms.X.sha256``) under arm identity ``version`` (1 or 2).

    Version 1 is the SHA-256 of the arm's own text (:meth:`Study.arm_sha256`), kept for a
    later phase of a study first locked with it.
    """
    if version == 1:
        return {arm: study.arm_sha256(arm) for arm in study.arms}
    return {arm: identity_sha256(obj) for arm, obj in arm_identities(study).items()}


def protocol_body(
    study: Study, secret: bytes, order: list[str], arm_identity: int = ARM_IDENTITY_VERSION
) -> dict[str, Any]:
    """The ``protocol.locked`` body of ``study`` with schedule ``order`` (manifest left empty).

    A study that declares ``[study] phase`` tags each hypothesis with it; :mod:`runner._phases`
    adds the ``phase`` member and keeps an earlier phase's hypotheses as they were locked.
    ``arm_identity`` is the arm identity version (``docs/prompts.md`` §3.1): 2 for a new study,
    the earlier phase's for a later phase.
    """
    hypotheses = []
    for h in study.hypotheses:
        record = h.locked()
        if study.phase is not None:
            record["phase"] = study.phase
        hypotheses.append(record)
    hashes = arm_hashes(study, arm_identity)
    arms = _arm_records(study)
    for arm, record in arms.items():
        record["sha256"] = hashes[arm]
    return {
        "study": study.id,
        "title": study.title,
        "manifest": {},
        **({"arm_identity": arm_identity} if arm_identity != 1 else {}),
        "arms": arms,
        **protocol_design(study),
        "design": {
            "replicates": study.replicates,
            "seed": study.seed,
            "bootstrap_seed": study.bootstrap_seed,
            "bootstrap_iterations": study.bootstrap_iterations,
            "order": "ascending SHA-256(seed|trial id)",
        },
        "trials": len(order),
        "schedule_sha256": schedule_sha256(order),
        "blinding_commitment": commitment(secret),
        "response": study.response_plan(),
        "hypotheses": hypotheses,
        **({"deviations": [dict(d) for d in study.deviations]} if study.deviations else {}),
        **({"reviews": {r.name: r.locked() for r in study.reviews}} if study.reviews else {}),
        "analysis": study.analysis,
        "amendable": list(study.amendable),
        "environment": environment(),
        **witnessing_record(study),
        **privacy_record(study.privacy),
    }


def artifact_event(rel: str, role: str, data: bytes) -> tuple[EventSpec, str]:
    """The ``artifact.locked`` event of study file ``rel`` with bytes ``data``, and their hash."""
    digest = hashlib.sha256(data).hexdigest()
    spec = EventSpec(
        "artifact.locked",
        {"path": rel, "role": role, "sha256": digest, "size": len(data)},
        {"content": data},
    )
    return spec, digest


def _load_for_lock(root: Path) -> Study:
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
    return study


def plan_check(study: Study) -> PlanCheck:
    """``plan/plan.json`` against the study (``docs/planning.md`` §6): problems and warnings."""
    plan_path = study.root / PLAN_FILE
    text = None
    if plan_path.is_file():
        try:
            text = plan_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return PlanCheck((f"{PLAN_FILE}: cannot read: {exc}",), ())
    if study.plan is None and text is None:
        return PlanCheck((), ())
    body = protocol_body(study, b"\0" * 32, [])
    return check_recorded_plan(study, body, text)


def checkpoint_file(phase: str | None, index: int) -> str:
    """The file a phase's registration checkpoint is written to.

    The first phase's is ``registration-checkpoint.txt``, a later phase's
    ``registration-checkpoint-<phase>.txt``.
    """
    if index == 0 or phase is None:
        return CHECKPOINT_FILE
    return f"registration-checkpoint-{phase}.txt"


def lock_study(root: str | Path, key: SigningKey) -> LockResult:
    """Lock the study at ``root``: artifacts, protocol, registration checkpoint.

    Creates the study ledger with ``key`` as owner if it does not exist yet. Everything is
    validated before anything is appended; the artifacts and the protocol are one transaction.
    A study already locked is locked again only as a new phase (``[study] phase`` names one
    not locked yet: :func:`_lock_phase`, rules in :mod:`runner._phases`).
    """
    root = Path(root)
    study = _load_for_lock(root)
    path = ledger_path(root)
    log = Ledger.open(path) if path.exists() else Ledger.create(path, origin=study.origin, key=key)
    with log:
        if protocol_event(log) is not None:
            note, seq, count, whole, digest, name = _lock_phase(root, study, log, key)
            failed = None
            if study.witnessing is not None:  # after the commit, as at the first lock
                note, failed = witness_registration(log, key, study.witnessing, seq + 1)
            if study.timestamping is not None and failed is None:
                failed = timestamp_registration(log, key, study.timestamping, seq + 1)
            checkpoint_path = root / name
            checkpoint_path.write_text(note, encoding="utf-8")
            if failed is not None:
                raise failed
            return LockResult(
                seq,
                count,
                len(whole),
                digest,
                note,
                checkpoint_path,
                tuple(study.replication_warnings()),
            )
        check_origin_matches(study, log.origin, path)
        planned = plan_check(study)  # the first lock only: a later phase keeps its plan
        if planned.problems:
            sep = " " if len(planned.problems) == 1 else "\n"
            raise StudyError("cannot lock:" + sep + "\n".join(planned.problems))
        secret = blinding_secret(study, create=True)
        order = schedule(study.seed, study.trial_ids())
        files = {r: role for r, role in study.locked_files().items() if r != OSF_FILE}
        specs: list[EventSpec] = []
        manifest: dict[str, str] = {}
        for rel, role in files.items():
            spec, manifest[rel] = artifact_event(rel, role, (root / rel).read_bytes())
            specs.append(spec)
        body = protocol_body(study, secret, order)
        body["manifest"] = manifest
        registration = _write_registration(root, body, files)  # docs/reporting.md §3
        spec, manifest[OSF_FILE] = artifact_event(OSF_FILE, OSF_ROLE, registration)
        specs.append(spec)
        files[OSF_FILE] = OSF_ROLE
        body["manifest"] = dict(sorted(manifest.items()))
        if study.phase is not None:
            body["phase"] = {
                "index": 0,
                "name": study.phase,
                "previous": None,
                "trials": len(order),
            }
        specs.append(EventSpec("protocol.locked", body, {"schedule": schedule_bytes(order)}))
        events = log.append_many(specs, key=key)
        note = log.sign_checkpoint(key)
        unwitnessed = None
        if study.witnessing is not None:  # after the commit: docs/witness.md section 8
            note, unwitnessed = witness_registration(log, key, study.witnessing, events[-1].seq + 1)
        if study.timestamping is not None and unwitnessed is None:
            unwitnessed = timestamp_registration(log, key, study.timestamping, events[-1].seq + 1)
    checkpoint_path = root / CHECKPOINT_FILE
    checkpoint_path.write_text(note, encoding="utf-8")
    if unwitnessed is not None:
        raise unwitnessed
    return LockResult(
        events[-1].seq,
        len(files),
        len(order),
        body["schedule_sha256"],
        note,
        checkpoint_path,
        tuple(study.replication_warnings()) + planned.warnings,
    )


def _write_registration(root: Path, body: dict[str, Any], files: dict[str, str]) -> bytes:
    """Write ``osf-preregistration.md`` for the ``protocol.locked`` ``body``; return its bytes.

    From the body and the locked ``plan/plan.json`` (``runner/_osf.py``, ``docs/reporting.md``
    §3), written before the lock commits (a lock that fails after leaves a file the next lock
    overwrites) and replaced atomically.
    """
    plan = next((rel for rel, role in files.items() if role == "plan"), None)
    plan_text = (root / plan).read_text(encoding="utf-8") if plan is not None else None
    try:
        data = osf_preregistration(body, plan_text)
    except ValueError as exc:
        raise StudyError(f"cannot lock: {exc}") from None
    target = root / OSF_FILE
    tmp = target.with_name(f".{OSF_FILE}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return data


def _lock_phase(
    root: Path, study: Study, log: Ledger, key: SigningKey
) -> tuple[str, int, int, list[str], str, str]:
    """Lock ``study`` as a new phase of the locked study in ``log``.

    Returns (registration checkpoint note, ``protocol.locked`` seq, files locked by this phase,
    whole schedule, schedule SHA-256, checkpoint file name). Raises :class:`StudyError`
    naming every rule the new phase breaks; nothing is appended then.
    """
    events = protocol_events(log)
    prev = events[-1]
    names = [phase_of(e.body)[1] for e in events]
    shown = ", ".join(repr(n) if n else "(unnamed)" for n in names)
    if study.phase is None or study.phase in names:
        raise StudyError(
            f"{root} is already locked (phases: {shown}); use 'ledger amend' to record a "
            "change, or name a new phase with [study] phase in study.toml to add arms, "
            "stimuli, items or hypotheses"
        )
    sealed = next(iter(log.events("scoring.sealed")), None)
    if sealed is not None:
        raise StudyError(
            f"{root}: scoring was sealed at seq {sealed.seq}; a new phase must be locked "
            "before scoring, so its trials are scored blind under the same commitment"
        )
    check_origin_matches(study, log.origin, log.path)
    where = f"cannot lock phase {study.phase!r} of {root}"
    problems: list[str] = []
    current = locked_manifest(log)
    files = study.locked_files()
    if OSF_FILE in current:  # the registration of the first lock, kept unchanged
        files[OSF_FILE] = OSF_ROLE
    specs: list[EventSpec] = []
    manifest: dict[str, str] = {}
    roles = {e.body["path"]: e.body["role"] for e in log.events("artifact.locked")}
    for rel in sorted(set(current) - set(files)):
        problems.append(f"{rel}: locked by an earlier phase, no longer part of the study")
    for rel, role in files.items():
        data = (root / rel).read_bytes()
        spec, digest = artifact_event(rel, role, data)
        manifest[rel] = digest
        if rel not in current:
            specs.append(spec)
            continue
        if digest == current[rel]:
            continue
        if role == "spec":
            specs.append(spec)
        elif role in GROWABLE_ROLES and roles.get(rel) == role:
            old = locked_bytes(log, rel, current[rel])
            if old is None or not data.startswith(old):
                problems.append(
                    f"{rel}: the {role} file as locked is not a prefix of it now: an "
                    "earlier phase's rows may not be edited or reordered, only new "
                    "rows appended"
                )
            specs.append(spec)
        else:
            problems.append(
                f"{rel}: locked by an earlier phase and changed (role {role}); a "
                "phase may add files, not change them ('ledger amend' records a "
                "deliberate change of an amendable file)"
            )
    secret = blinding_secret(study)
    ids = study.trial_ids()
    prev_order = log.blob(prev.blobs["schedule"]).decode("utf-8").splitlines()
    known = set(prev_order)
    present = set(ids)
    dropped = [t for t in prev_order if t not in present]
    if dropped:
        problems.append(
            f"{len(dropped)} trial(s) of an earlier phase are no longer in the "
            f"design, e.g. {dropped[0]}"
        )
    added = schedule(study.seed, [t for t in ids if t not in known])
    order = prev_order + added
    try:
        version = identity_version(prev.body)
    except StudyError as exc:
        raise StudyError(f"{where}: {exc} (seq {prev.seq})") from None
    body = protocol_body(study, secret, order, version)
    problems += plan_problems(prev.body, body)
    body["hypotheses"], more = merge_hypotheses(prev.body, body, study.phase)
    problems += more
    if not added and len(body["hypotheses"]) == len(prev.body.get("hypotheses") or []):
        problems.append("the phase adds no trial and no hypothesis")
    if problems:
        raise StudyError(f"{where}:\n" + "\n".join(f"  {p}" for p in problems))
    index = phase_of(prev.body)[0] + 1
    body["manifest"] = manifest
    body["phase"] = {
        "index": index,
        "name": study.phase,
        "previous": prev.seq,
        "trials": len(added),
    }
    specs.append(EventSpec("protocol.locked", body, {"schedule": schedule_bytes(order)}))
    appended = log.append_many(specs, key=key)
    note = log.sign_checkpoint(key)
    return (
        note,
        appended[-1].seq,
        len(specs) - 1,
        order,
        body["schedule_sha256"],
        checkpoint_file(study.phase, index),
    )


def witnessing_record(study: Study) -> dict[str, Any]:
    """``protocol.locked``'s ``witnessing`` and ``timestamping`` members, when declared."""
    out: dict[str, Any] = {}
    if study.witnessing is not None:
        out["witnessing"] = study.witnessing.record()
    if study.timestamping is not None:
        out["timestamping"] = study.timestamping.record()
    return out


def timestamp_registration(
    log: Ledger, key: SigningKey, spec: TimestampSpec, size: int
) -> StudyError | None:
    """Time-stamp the registration checkpoint (after the commit); the error, if it failed."""
    try:
        timestamp_checkpoint(log, key, spec, size)
    except StudyError as exc:
        return type(exc)(f"locked, but the registration checkpoint is not time-stamped: {exc}")
    return None


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
        if amendment.seq < event.seq:  # already in the phase's manifest
            continue
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
        lines = [f"  {rel}: locked {old}, now {new or 'missing'}" for rel, old, new in changes]
        raise StudyError(
            f"{root}: {len(changes)} locked file(s) changed since lock:\n"
            + "\n".join(lines)
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
        if any(rel == OSF_FILE for rel, _, _ in changes):
            raise StudyError(
                f"{OSF_FILE} is the registration written by 'ledger lock' and may not be "
                "amended; restore it (docs/reporting.md §3)"
            )
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
