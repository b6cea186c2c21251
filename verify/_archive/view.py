"""What the archive checks share: the events, the files and their hashes, the blobs."""

from __future__ import annotations

import bisect
import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterator, Mapping
from typing import Any

from verify._archive.ledger_checks import ArchiveRun
from verify._envelope import is_hex64
from verify._items import ItemError
from verify._privacy import Withheld
from verify._prompts import RESERVED_COMPONENTS, LockedStudy, PromptError
from verify._reader.columns import EventColumns
from verify._reader.files import MAX_PARSED_BYTES, show
from verify._reader.names import sha_hex
from verify._sealed import content_of

__all__ = ["Archive", "Bodies"]


class Bodies(Mapping[int, dict[str, Any]]):
    """The bodies of one kind's events by seq, like ``{seq: archive.body(seq) ...}``.

    Nothing is held but the seqs: each body is rebuilt from the packed columns when read (a
    body that is not an object reads as ``{}``). Looking a key up behaves as the dict would:
    an unhashable key raises ``TypeError``, ``True`` finds seq 1.
    """

    def __init__(self, envs: EventColumns, seqs: list[int]) -> None:
        self._envs = envs
        self._seqs = seqs  # ascending

    def _index(self, key: Any) -> int | None:
        hash(key)  # as a dict lookup: an unhashable key is a TypeError
        if not isinstance(key, (int, float)):
            return None
        i = bisect.bisect_left(self._seqs, key)
        return i if i < len(self._seqs) and self._seqs[i] == key else None

    def __getitem__(self, key: Any) -> dict[str, Any]:
        i = self._index(key)
        if i is None:
            raise KeyError(key)
        body = self._envs.body(self._seqs[i])
        return body if type(body) is dict else {}

    def __contains__(self, key: object) -> bool:
        return self._index(key) is not None

    def __iter__(self) -> Iterator[int]:
        return iter(self._seqs)

    def __len__(self) -> int:
        return len(self._seqs)


class Archive:
    """What the archive checks share: the events, the files and their hashes, the blobs."""

    _CACHE_BYTES = 64 << 20  # blobs kept in memory between checks, at most

    def __init__(self, run: ArchiveRun) -> None:
        self.files = run.files
        self.key_files = {re.sub(r"[/:+]", "_", actor) + ".vkey" for actor in run.registry.keys}
        self.roles = {actor: rec.role for actor, rec in run.registry.keys.items()}
        self.hashes = run.files.hashes
        self.envs: EventColumns = run.envs  # packed: envs[seq] rebuilds one envelope
        self.n = len(run.envs)
        self.current: int | None = None  # the last event read (named if a check stops on it)
        self._unread: dict[str, str] = {}
        self.schedule_problem: str | None = None
        self._cached = 0
        self.checkpoint_sizes = {s.cp.size for s in run.stored if s.cp is not None}
        self.stored_checkpoints = {s.cp.size: s for s in run.stored if s.cp is not None}
        # the auditor's witnesses (``--witness``, ``--quorum``, ``--witness-skew``)
        self.witness_keys: tuple[str, ...] = ()
        self.witness_quorum: int | None = None
        self.witness_skew = 300.0
        self.tsa_roots: bytes | None = None  # ``--tsa-cert``: PEM root certificates
        self.by_kind = self.envs.kinds()  # the seqs of each kind's events, ascending
        # the protocol in force is the last protocol.locked: a study locked in phases has one
        # per phase, each holding the whole plan (docs/study-spec.md, "Phases")
        locked = self.of_kind("protocol.locked")
        self.phase_seqs: list[int] = list(locked)
        self.protocol_seq: int | None = locked[-1] if locked else None
        self.protocol: dict[str, Any] = self.body(locked[-1]) if locked else {}
        self.locked_files: dict[str, tuple[str, str, int]] = {}  # path -> (role, sha256, seq)
        self.locked_versions: dict[str, list[tuple[str, str, int]]] = {}  # every version
        self._read_artifacts()
        self._arm_texts: dict[str, str] | None = None
        self._arm_problem: str | None = None
        self._blob_cache: dict[str, bytes | None] = {}
        self._study: LockedStudy | None = None
        self._study_problem: str | None = None
        # paths put back from a public archive's annex (docs/privacy.md): checked against
        # their commitments by the ``privacy`` check, not listed by the manifest or the export
        self.restored: frozenset[str] = frozenset()
        # a public archive whose trial set cannot be re-derived (its items are withheld): the
        # withheld path; the schedule is then the signed schedule blob, checked in seed order
        self.signed_schedule: str | None = None

    def _read_artifacts(self) -> None:
        """Every artifact.locked version by path; the last one is in force."""
        for seq in self.of_kind("artifact.locked"):
            body = self.body(seq)
            path, role, digest = body.get("path"), body.get("role"), body.get("sha256")
            if type(path) is str and type(role) is str and type(digest) is str:
                self.locked_files[path] = (role, digest, seq)  # the last version is in force
                self.locked_versions.setdefault(path, []).append((role, digest, seq))

    def of_kind(self, kind: str) -> list[int]:
        """The seqs of the events of ``kind``, ascending."""
        return self.by_kind.get(kind, [])

    def bodies(self, kind: str) -> Bodies:
        """The bodies of the events of ``kind`` by seq, each rebuilt when read (none held)."""
        return Bodies(self.envs, self.of_kind(kind))

    def body(self, seq: int) -> dict[str, Any]:
        """Event ``seq``'s body, or ``{}`` when it is unreadable or not an object."""
        self.current = seq
        body = self.envs.body(seq)
        return body if type(body) is dict else {}

    def blob_ref(self, seq: int, name: str) -> str | None:
        """The address event ``seq`` gives its blob ``name``, or ``None``."""
        self.current = seq
        blobs = self.envs.blobs(seq)
        digest = blobs.get(name) if type(blobs) is dict else None
        return digest if is_hex64(digest) else None

    def blob(self, digest: str | None, limit: int | None = None) -> bytes | None:
        """The bytes of ``blobs/<digest>`` if listed, within ``limit`` and hashing to its name.

        ``digest`` must be 64 lowercase hex (anything else is never looked up as a path).
        """
        if digest is None or not is_hex64(digest):
            return None
        if digest in self._blob_cache:
            data = self._blob_cache[digest]
            return data if data is None or limit is None or len(data) <= limit else None
        rel = f"blobs/{digest}"
        if self.hashes.get(rel) != digest:
            return None
        data = self.files.get(rel, limit)[0]
        if data is not None and sha_hex(data) != digest:
            data = None
        if data is not None:  # a sealed blob's content (docs/ledger-format.md §6.1)
            data = content_of(data)
        if data is not None and self._cached + len(data) <= self._CACHE_BYTES:
            self._blob_cache[digest] = data
            self._cached += len(data)
        return data

    def blob_ok(self, digest: str | None) -> bool:
        """Whether ``blobs/<digest>`` is a listed regular file whose content hashes to its name.

        A blob a public archive withholds counts as present: its address is signed, and its
        content is what the ``privacy`` check reports as not re-derived (``docs/privacy.md``).
        """
        try:
            return is_hex64(digest) and self.hashes.get(f"blobs/{digest}") == digest
        except Withheld:
            return True

    def blob_size(self, digest: str) -> int | None:
        """The size of the listed ``blobs/<digest>``, or ``None``."""
        entry = self.files.files.get(f"blobs/{digest}")
        return entry.size if entry is not None else None

    def file(self, rel: str) -> bytes | None:
        """The bytes of the archive file ``rel``, or ``None`` (:meth:`absent` says why)."""
        data, why = self.files.get(rel)
        if data is None:
            self._unread[rel] = why
        return data

    def absent(self, rel: str) -> str:
        """Why :meth:`file` returned ``None`` for ``rel``, naming it: ``README.md is missing``."""
        return self._unread.get(rel) or f"{show(rel)} {self.files.describe(rel)}"

    def locked_blob(self, path: str, before: int | None = None) -> bytes | None:
        """The locked content of ``path`` (its last ``artifact.locked`` blob), or ``None``.

        With ``before``, the version locked before that seq (a phase's files as it locked
        them).
        """
        versions = [
            v for v in self.locked_versions.get(path, []) if before is None or v[2] < before
        ]
        if not versions:
            return None
        return self.blob(self.blob_ref(versions[-1][2], "content"), MAX_PARSED_BYTES)

    def current_manifest(self) -> dict[str, tuple[str, int]]:
        """Locked path -> (sha256, seq of the event that set it): as locked, then amended."""
        out: dict[str, tuple[str, int]] = {}
        manifest = self.protocol.get("manifest")
        if type(manifest) is dict:
            for path, digest in manifest.items():
                out[path] = (str(digest), self.protocol_seq or 0)
        for seq in self.of_kind("protocol.amended"):
            if self.protocol_seq is not None and seq < self.protocol_seq:
                continue  # in the manifest of the phase locked after it
            changes = self.body(seq).get("changes")
            for change in changes if type(changes) is list else []:
                if type(change) is dict and type(change.get("path")) is str:
                    out[change["path"]] = (str(change.get("sha256")), seq)
        return out

    def spec(self, before: int | None = None) -> dict[str, Any] | None:
        """The locked ``study.toml`` (role ``spec``) parsed, or ``None``.

        With ``before``, the version locked before that seq.
        """
        for path, (role, _, _) in self.locked_files.items():
            if role == "spec":
                data = self.locked_blob(path, before)
                if data is None:
                    return None
                try:
                    return tomllib.loads(data.decode("utf-8"))
                except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                    return None
        return None

    def arm_texts(self) -> tuple[dict[str, str], str | None]:
        """Each locked arm's composed prompt, from the locked spec and component files."""
        if self._arm_texts is not None:
            return self._arm_texts, self._arm_problem
        texts: dict[str, str] = {}
        problem: str | None = None
        spec = self.spec()
        arms = self.protocol.get("arms")
        components = spec.get("components") if spec is not None else None
        if type(arms) is not dict:
            problem = "protocol.locked has no arms object"
        elif type(components) is not dict:
            problem = "the locked study.toml cannot be read or has no [components] table"
        else:
            for arm, info in arms.items():
                text, why = self._arm_text(arm, info, components)
                if text is None:
                    problem = problem or why
                else:
                    texts[arm] = text
        self._arm_texts, self._arm_problem = texts, problem
        return texts, problem

    def _arm_text(
        self, arm: str, info: Any, components: dict[str, Any]
    ) -> tuple[str | None, str | None]:
        """One arm's composed prompt and None, or None and why it cannot be composed."""
        names = info.get("components") if type(info) is dict else None
        if type(names) is not list:
            return None, f"arm {arm} has no component list in protocol.locked"
        parts: list[str] = []
        for name in names:
            if name in RESERVED_COMPONENTS and name not in components:
                continue  # the item block or the inline examples (docs/prompts.md §3)
            path = components.get(name)
            data = self.locked_blob(path) if type(path) is str else None
            if data is None:
                return None, f"arm {arm}: component {name!r} is not a locked file with a blob"
            try:
                parts.append(data.decode("utf-8").rstrip("\n"))
            except UnicodeDecodeError:
                return None, f"arm {arm}: component {name!r} is not UTF-8"
        return ("\n\n".join(parts) + "\n" if parts else ""), None

    def study(self) -> tuple[LockedStudy | None, str | None]:
        """The locked study as ``docs/prompts.md`` renders it, or ``(None, why not)``.

        Built from the ``protocol.locked`` in force, the locked spec's ``[components]`` and
        every locked file as locked (requests are checked against the files as locked, not as
        amended).
        """
        if self._study is not None or self._study_problem is not None:
            return self._study, self._study_problem
        self._study, self._study_problem = self.study_at(self.protocol_seq)
        return self._study, self._study_problem

    def study_at(self, pseq: int | None) -> tuple[LockedStudy | None, str | None]:
        """The study as the ``protocol.locked`` at ``pseq`` locked it, with its files then."""
        if pseq is None:
            return None, "no protocol.locked"
        before = pseq
        protocol = self.body(pseq)
        spec = self.spec(before)
        components = spec.get("components") if spec is not None else None
        paths = (
            {k: v for k, v in components.items() if type(v) is str}
            if type(components) is dict
            else {}
        )
        stimuli = {
            path.rsplit("/", 1)[-1].rsplit(".", 1)[0]: path
            for path, versions in self.locked_versions.items()
            if any(v[0] == "stimulus" and v[2] < before for v in versions)
        }
        try:
            return LockedStudy(
                protocol, lambda p: self.locked_blob(p, before), paths, stimuli, spec
            ), None
        except (PromptError, ItemError) as exc:
            return None, str(exc)

    def schedule(self) -> list[str]:
        """The trial ids in locked execution order (``docs/randomization.md``, prompts.md §7).

        Empty when the design cannot be read, or when it schedules more trials than the log
        has events (each trial needs one): :attr:`schedule_problem` then says why.
        """
        self.schedule_problem = None
        if not self.protocol:
            return []
        try:
            study, problem = self.study()
        except Withheld as withheld:
            if len(self.phase_seqs) > 1:
                raise
            return self._signed_schedule(withheld)
        if study is None:
            self.schedule_problem = f"the locked design cannot be read: {problem}"
            return []
        try:
            count = study.trial_count()
            if count > self.n:
                arms = [
                    f"arm {a}: {len(study.arm_models(a))} model(s) x {len(study.arm_items(a))} "
                    f"items x {study.arm_replicates(a)} replicates"
                    for a in list(study.arms)[:3]
                ]
                more = ", ..." if len(study.arms) > 3 else ""
                self.schedule_problem = (
                    f"the design schedules {count} trials ({', '.join(arms)}{more}), more "
                    f"trials than the log's {self.n} events could record"
                )
                return []
            if len(self.phase_seqs) < 2:
                return study.trial_ids()
            return self._phased_schedule()
        except PromptError as exc:
            self.schedule_problem = f"the locked design cannot be read: {exc}"
            return []

    def _signed_schedule(self, withheld: Withheld) -> list[str]:
        """A public archive's schedule: the signed blob's trial ids, in the seed's order.

        The trial set comes from the withheld items, so it is taken as signed; its order is
        re-derived (ascending ``SHA-256("{seed}|{trial id}")``, ``docs/randomization.md``).
        """
        pseq = self.protocol_seq
        blob = self.blob(self.blob_ref(pseq, "schedule"), MAX_PARSED_BYTES) if pseq else None
        design = self.protocol.get("design")
        seed = design.get("seed") if type(design) is dict else None
        if blob is None or seed is None:
            raise withheld
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError:
            self.schedule_problem = "the schedule blob is not UTF-8"
            return []
        ids = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
        order = sorted(ids, key=lambda t: sha_hex(f"{seed}|{t}".encode()))
        if ids != order or len(set(ids)) != len(ids):
            self.schedule_problem = (
                "the signed schedule blob is not its trial ids in ascending "
                f'SHA-256("{seed}|{{trial id}}") order without repeats'
            )
            return []
        self.signed_schedule = withheld.rel
        return ids

    def _phased_schedule(self) -> list[str]:
        """The schedule of a study locked in phases (``docs/study-spec.md``, "Phases").

        Each phase's design, read as that phase locked it, adds the trials no earlier phase
        had, in the seed's order, after the earlier phases' trials.
        """
        order: list[str] = []
        seen: set[str] = set()
        for pseq in self.phase_seqs:
            study, problem = self.study_at(pseq)
            if study is None:
                self.schedule_problem = f"the design of phase seq {pseq} cannot be read: {problem}"
                return []
            added = [t for t in study.trial_ids() if t not in seen]
            order += added
            seen.update(added)
        return order

    def phase_schedules(self) -> list[tuple[int, list[str]]]:
        """(protocol.locked seq, the trials that phase added) per phase, from the design."""
        out: list[tuple[int, list[str]]] = []
        seen: set[str] = set()
        for pseq in self.phase_seqs:
            study, _ = self.study_at(pseq)
            if study is None:
                return out
            added = [t for t in study.trial_ids() if t not in seen]
            seen.update(added)
            out.append((pseq, added))
        return out

    def codes(self, secret: bytes) -> dict[str, str]:
        """Each locked arm's blinded code: ``HMAC-SHA256(secret, arm)[:12]``."""
        arms = self.protocol.get("arms")
        return {
            arm: hmac.new(secret, arm.encode("utf-8"), hashlib.sha256).hexdigest()[:12]
            for arm in (arms if type(arms) is dict else {})
        }

    def revealed_codes(self) -> dict[str, str]:
        """The arm codes opened by ``blinding.revealed`` (recomputed from its secret), or {}."""
        revealed = self.of_kind("blinding.revealed")
        if not revealed:
            return {}
        secret_hex = self.body(revealed[-1]).get("secret_hex")
        try:
            secret = bytes.fromhex(secret_hex) if type(secret_hex) is str else None
        except ValueError:
            secret = None
        return self.codes(secret) if secret is not None else {}
