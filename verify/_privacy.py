"""Public archives and sealed annexes, read as ``docs/privacy.md`` defines them (no writer code).

A *public archive* is one whose last ``export.created`` has a ``privacy`` member: the locked
``withhold`` list, ``withheld_blobs`` (count and listing SHA-256 of the blob addresses left
out) and ``withheld_files`` (archive path -> commitment). Without its annex the verifier runs
every check that needs no withheld byte; a check that needs one stops with
:class:`Withheld`, and is reported ``LIMITED`` naming what it could not re-derive. With the
annex (decrypted with an auditor's X25519 identity), every withheld blob and file is checked
against its commitment, put back in a private copy of the archive, and the full verification
runs on that copy.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from verify import _sealed
from verify._canonical import canonical_json
from verify._report import Check, Status

__all__ = [
    "Annex",
    "AnnexError",
    "Privacy",
    "Withheld",
    "annex_problems",
    "open_annex",
    "privacy_check",
    "privacy_of",
    "restored_copy",
]

ANNEX_MAGIC = "prompt-ledger annex v1"
MAX_ANNEX_BYTES = 4 << 30
MAX_IDENTITY_BYTES = 4096


class Withheld(BaseException):
    """A check needed ``rel``, which the public archive withholds (``docs/privacy.md``).

    A :class:`BaseException`, so that a check's own ``except Exception`` (which turns an error
    into a FAIL) lets it through to the runner, which reports the check ``LIMITED``.
    """

    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


class AnnexError(Exception):
    """An annex that cannot be opened, or that does not complete this archive."""


@dataclass
class Privacy:
    """What the public archive withholds, as its signed ``export.created`` says."""

    withhold: list[str]
    blobs: set[str]  # withheld blob addresses, re-derived from the events and the policy
    files: dict[str, str]  # withheld archive path -> commitment (hex)
    listing: tuple[Any, Any]  # export.created's withheld_blobs (count, listing_sha256)
    problems: list[str] = field(default_factory=list)
    restored: bool = False  # the annex was opened and its content put back
    sealed: set[str] = field(default_factory=set)  # addresses the policy has the ledger seal
    where: dict[str, str] = field(default_factory=dict)  # address -> "seq N (kind, blob name)"

    def describe(self, rel: str) -> str:
        """``rel`` with the event that names it, when it is a withheld blob."""
        if rel.startswith("blobs/") and rel[6:] in self.where:
            return f"{rel} ({self.where[rel[6:]]})"
        return rel

    def rel_withheld(self, rel: str) -> bool:
        """Whether archive path ``rel`` is withheld (a withheld blob or file)."""
        if rel.startswith("blobs/"):
            return rel[6:] in self.blobs
        return rel in self.files

    def limits(self) -> str:
        """What the public archive cannot show, in one sentence."""
        return (
            f"{len(self.blobs)} blob(s) and {len(self.files)} file(s) withheld under the "
            f"locked privacy policy ({', '.join(self.withhold)})"
        )


def _listing(names: Sequence[str]) -> str:
    return hashlib.sha256("".join(f"{n}\n" for n in sorted(names)).encode("ascii")).hexdigest()


def _of_kind(envs: Sequence[dict[str, Any] | None], kind: str) -> list[dict[str, Any]]:
    """The envelopes of ``kind``, in order (through the packed columns' index when it has one)."""
    of_kind = getattr(envs, "of_kind", None)
    if of_kind is not None:
        return [env for seq in of_kind(kind) if (env := envs[seq]) is not None]
    return [e for e in envs if e is not None and e.get("kind") == kind]


def _export_privacy(envs: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The ``privacy`` object of the last export.created, if it has one."""
    exports = _of_kind(envs, "export.created")
    body = exports[-1].get("body") if exports else None
    privacy = body.get("privacy") if isinstance(body, dict) else None
    return privacy if isinstance(privacy, dict) else None


def privacy_of(envs: Sequence[dict[str, Any] | None]) -> Privacy | None:
    """The :class:`Privacy` of a public archive's events, or ``None`` for any other archive."""
    privacy = _export_privacy(envs)
    if privacy is None:
        return None
    withhold = [str(x) for x in privacy.get("withhold") or [] if isinstance(x, str)]
    pairs = {tuple(x.split(":", 1)) for x in withhold if ":" in x}
    roles = {name for kind, name in pairs if kind == "artifact.locked"}
    blobs, sealed, where = _withheld_blobs(envs, pairs, roles)
    listed = privacy.get("withheld_blobs")
    listed = listed if isinstance(listed, dict) else {}
    files = privacy.get("withheld_files")
    files = {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    found = Privacy(
        withhold,
        blobs,
        files,
        (listed.get("count"), listed.get("listing_sha256")),
        sealed=sealed,
        where=where,
    )
    found.problems.extend(_policy_problems(envs, privacy, found, pairs, roles))
    return found


def _policy_problems(
    envs: Sequence[dict[str, Any] | None],
    privacy: dict[str, Any],
    found: Privacy,
    pairs: set[tuple[str, ...]],
    roles: set[str],
) -> list[str]:
    """How export.created's privacy departs from the locked policy and the events."""
    problems: list[str] = []
    allowed = _allowed_files(envs, pairs, roles)
    for rel in sorted(found.files):
        if not allowed(rel):
            problems.append(
                f"export.created withholds {rel}, which the locked policy does not withhold "
                "(docs/privacy.md §3 lists the files each entry withholds)"
            )
            break
    locked = _of_kind(envs, "protocol.locked")
    lbody = locked[-1].get("body") if locked else None
    lpriv = lbody.get("privacy") if isinstance(lbody, dict) else None
    if not isinstance(lpriv, dict) or lpriv.get("withhold") != privacy.get("withhold"):
        problems.append(
            "export.created privacy.withhold is not the policy locked in protocol.locked"
        )
    blobs = found.blobs
    if found.listing != (len(blobs), _listing(sorted(blobs))):
        problems.append(
            f"export.created privacy.withheld_blobs {found.listing} is not the {len(blobs)} "
            "blob(s) the locked policy names in the events"
        )
    return problems


def _withheld_blobs(
    envs: Sequence[dict[str, Any] | None], pairs: set[tuple[str, ...]], roles: set[str]
) -> tuple[set[str], set[str], dict[str, str]]:
    """(every blob the policy withholds, those sealed, where each blob is referenced).

    The content of locked files of a withheld role and of their amendments; the blobs of
    each withheld ``kind:name`` pair, sealed (docs/privacy.md §3).
    """
    blobs: set[str] = set()
    sealed: set[str] = set()
    where: dict[str, str] = {}
    locked_by_path: dict[str, bool] = {}
    for env in envs:
        if env is None:
            continue
        kind, ebody, eblobs = env.get("kind"), env.get("body"), env.get("blobs")
        if not isinstance(ebody, dict) or not isinstance(eblobs, dict):
            continue
        for name, ref in eblobs.items():
            if isinstance(ref, str):
                where.setdefault(ref, f"seq {env.get('seq')} {kind} {name}")
        if kind == "artifact.locked":
            if ebody.get("role") in roles:
                locked_by_path[str(ebody.get("path"))] = True
                blobs.update(str(v) for k, v in eblobs.items() if k == "content")
        elif kind == "protocol.amended":
            blobs.update(_amended_blobs(ebody, eblobs, locked_by_path))
        else:
            for name, ref in eblobs.items():
                if (kind, name) in pairs and isinstance(ref, str):
                    blobs.add(ref)
                    sealed.add(ref)
    return blobs, sealed, where


def _amended_blobs(
    body: dict[str, Any], blobs: dict[str, Any], withheld_paths: dict[str, bool]
) -> list[str]:
    """The new content blobs a protocol.amended gives withheld locked files."""
    out: list[str] = []
    for change in body.get("changes") or []:
        if isinstance(change, dict) and withheld_paths.get(str(change.get("path"))):
            ref = blobs.get(str(change.get("blob")))
            if isinstance(ref, str):
                out.append(ref)
    return out


def _allowed_files(
    envs: Sequence[dict[str, Any] | None], pairs: set[tuple[str, ...]], roles: set[str]
) -> Any:
    """Which archive files the policy may withhold (``docs/privacy.md`` §3), as a predicate."""
    paths: set[str] = set()
    for env in envs:
        body = env.get("body") if env is not None else None
        if env is None or env.get("kind") != "artifact.locked" or not isinstance(body, dict):
            continue
        rel, role = str(body.get("path")), body.get("role")
        if role in roles:
            name = rel.rsplit("/", 1)[-1]
            paths.add(
                f"stimuli/{name}"
                if role == "stimulus"
                else f"truth/{name}"
                if role == "truth"
                else f"protocol/{rel}"
            )
    if ("analysis.result", "items_csv") in pairs:
        paths.add("analysis/items.csv")
    if ("analysis.result", "trials_csv") in pairs:
        paths.add("analysis/trials.csv")
    if pairs & {("step.responded", "response"), ("step.requested", "request")}:
        paths.add("trials/steps.csv")
    reviews = bool(pairs & {("trial.responded", "response")}) or "items" in roles

    def allowed(rel: str) -> bool:
        return rel in paths or (
            reviews and rel.startswith("analysis/review/") and rel.endswith(".csv")
        )

    return allowed


def privacy_check(privacy: Privacy) -> Check:
    """The ``privacy`` check: the withheld listing is the locked policy's, and its status."""
    if privacy.problems:
        return Check("privacy", Status.FAIL, privacy.problems[0] + ".")
    if privacy.restored:
        return Check(
            "privacy",
            Status.PASS,
            f"public archive completed by its annex: {privacy.limits()}; every withheld blob "
            "and file opened its commitment and was verified in full",
        )
    return Check(
        "privacy",
        Status.LIMITED,
        f"public archive: {privacy.limits()}; their content was not re-derived (verify with "
        "--annex FILE --identity KEY to check it)",
    )


# ---------------------------------------------------------------------------------- annex


@dataclass
class Annex:
    """A decrypted annex: stored blob bytes by address, files as (salt, content)."""

    header: dict[str, Any]
    blobs: dict[str, bytes]
    files: dict[str, tuple[bytes, bytes]]


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise AnnexError(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AnnexError(f"{what} is not valid base64") from None


def read_identity(path: str) -> tuple[str, bytes]:
    """An auditor's secret key file: ``AUDITOR-SECRET-KEY+<name>+<base64 of 32 bytes>``."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_IDENTITY_BYTES + 1)
    except OSError as exc:
        raise AnnexError(f"--identity {path}: cannot be read ({exc.strerror or exc})") from None
    parts = raw.decode("ascii", "replace").strip().split("+", 2)  # base64 may hold '+'
    if len(raw) > MAX_IDENTITY_BYTES or len(parts) != 3 or parts[0] != "AUDITOR-SECRET-KEY":
        raise AnnexError(
            f"--identity {path}: not an auditor secret key (AUDITOR-SECRET-KEY+<name>+<base64>)"
        )
    secret = _b64(parts[2], f"--identity {path}")
    if len(secret) != 32:
        raise AnnexError(f"--identity {path}: the X25519 key is not 32 bytes")
    return parts[1], secret


def open_annex(path: str, identity: str) -> Annex:
    """Decrypt the annex at ``path`` with the auditor secret key file ``identity``."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    name, secret = read_identity(identity)
    doc = _read_annex(path)
    header = doc["header"]
    head = canonical_json(header)
    key = X25519PrivateKey.from_private_bytes(secret)
    file_key = _file_key(path, name, doc, key, head)
    try:
        plain = ChaCha20Poly1305(file_key).decrypt(
            _b64(doc.get("nonce"), "the nonce"), _b64(doc.get("ciphertext"), "the payload"), head
        )
    except (InvalidTag, ValueError):
        raise AnnexError(
            f"--annex {path}: the payload does not decrypt (a corrupted or altered annex)"
        ) from None
    payload = json.loads(plain)
    blobs = {str(a): _b64(v, f"annex blob {a}") for a, v in (payload.get("blobs") or {}).items()}
    files: dict[str, tuple[bytes, bytes]] = {}
    for rel, entry in (payload.get("files") or {}).items():
        if not isinstance(entry, dict):
            raise AnnexError(f"--annex {path}: file {rel!r} is malformed")
        files[str(rel)] = (
            _b64(entry.get("salt"), f"annex file {rel} salt"),
            _b64(entry.get("content"), f"annex file {rel}"),
        )
    return Annex(header, blobs, files)


def _read_annex(path: str) -> dict[str, Any]:
    """The annex file's JSON document, its header checked; :class:`AnnexError` if it is not."""
    try:
        size = os.path.getsize(path)
        if size > MAX_ANNEX_BYTES:
            raise AnnexError(f"--annex {path}: {size:,} bytes, more than the 4 GiB limit")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_ANNEX_BYTES + 1)
    except OSError as exc:
        raise AnnexError(f"--annex {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise AnnexError(f"--annex {path}: not an annex (not JSON); is it corrupted?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("header"), dict):
        raise AnnexError(f"--annex {path}: not an annex (no header)")
    if doc["header"].get("annex") != ANNEX_MAGIC:
        raise AnnexError(f"--annex {path}: not a '{ANNEX_MAGIC}' file")
    return doc


def _file_key(path: str, name: str, doc: dict[str, Any], key: Any, head: bytes) -> bytes:
    """The annex's file key, unsealed (HPKE) from the recipient entry of ``key``."""
    from cryptography.hazmat.primitives import hpke

    mine = key.public_key().public_bytes_raw()
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    listed = doc.get("recipients")
    recipients: list[Any] = listed if isinstance(listed, list) else []
    for r in recipients:
        if isinstance(r, dict) and _b64(r.get("public_key"), "a recipient's key") == mine:
            try:
                file_key: bytes = suite.decrypt(
                    _b64(r.get("sealed_key"), "a sealed key"), key, info=head
                )
            except Exception:
                raise AnnexError(
                    f"--annex {path}: the file key sealed to {name} does not open (a corrupted "
                    "or altered annex)"
                ) from None
            return file_key
    named = ", ".join(str(r.get("auditor")) for r in recipients if isinstance(r, dict))
    raise AnnexError(
        f"--annex {path}: not sealed to the identity {name!r} "
        f"(it is sealed to: {named or 'nobody'})"
    )


def _annex_header_problem(
    h: dict[str, Any],
    envs: Sequence[dict[str, Any] | None],
    leaf_hash: str | None,
    export_seq: int | None,
) -> str | None:
    """Why the annex's header is not for this archive's study, origin and export, or None."""
    exports = _of_kind(envs, "export.created")
    body = exports[-1].get("body") if exports else {}
    genesis = envs[0].get("body") if envs and envs[0] is not None else {}
    study = body.get("study") if isinstance(body, dict) else None
    origin = genesis.get("origin") if isinstance(genesis, dict) else None
    if h.get("study") != study or h.get("origin") != origin:
        return (
            f"the annex is for study {h.get('study')!r} (origin {h.get('origin')!r}), not "
            f"this archive's {study!r} (origin {origin!r})"
        )
    if h.get("export_seq") != export_seq or h.get("export_leaf_hash") != leaf_hash:
        return (
            f"the annex is for export.created seq {h.get('export_seq')!r}, not this "
            f"archive's export (seq {export_seq}): another export of the study"
        )
    return None


def annex_problems(
    annex: Annex,
    privacy: Privacy,
    envs: Sequence[dict[str, Any] | None],
    leaf_hash: str | None,
    export_seq: int | None,
) -> list[str]:
    """Why ``annex`` does not complete this public archive (empty: it does), naming the item."""
    wrong = _annex_header_problem(annex.header, envs, leaf_hash, export_seq)
    if wrong is not None:
        return [wrong]
    out = [
        problem
        for address in sorted(privacy.blobs)
        if (problem := _annex_blob_problem(annex, privacy, address)) is not None
    ]
    for address in sorted(set(annex.blobs) - privacy.blobs):
        out.append(f"annex blob {address} is not withheld by this archive")
    for rel, commitment in sorted(privacy.files.items()):
        entry = annex.files.get(rel)
        if entry is None:
            out.append(f"withheld file {rel} is not in the annex")
        elif (
            len(entry[0]) != _sealed.SALT_BYTES
            or _sealed.address_for(entry[1], _sealed.MAGIC + entry[0]) != commitment
        ):
            out.append(f"annex file {rel} does not open its commitment {commitment}")
    for rel in sorted(set(annex.files) - set(privacy.files)):
        out.append(f"annex file {rel} is not withheld by this archive")
    return out


def _annex_blob_problem(annex: Annex, privacy: Privacy, address: str) -> str | None:
    """Why the annex does not give withheld blob ``address`` (sealed if it must be), or None."""
    stored = annex.blobs.get(address)
    if stored is None:
        return f"withheld blob {address} is not in the annex"
    if hashlib.sha256(stored).hexdigest() != address:
        return (
            f"annex blob {address} does not open its commitment (its bytes hash to "
            f"{hashlib.sha256(stored).hexdigest()})"
        )
    if address in privacy.sealed and _sealed.salt_of(stored) is None:
        what = privacy.describe("blobs/" + address)
        return (
            f"withheld blob {what} is not sealed: its address is its content's "
            "plain SHA-256, which does not hide it"
        )
    return None


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


@contextmanager
def restored_copy(public: str, annex: Annex) -> Iterator[str]:
    """A private temporary copy of the archive ``public`` with the annex's content put back."""
    tmp = tempfile.mkdtemp(prefix="verify-annex-")
    try:
        copy = os.path.join(tmp, "archive")
        shutil.copytree(public, copy, symlinks=True)
        for address, data in annex.blobs.items():
            with open(os.path.join(copy, "blobs", address), "xb") as fh:
                fh.write(data)
        for rel, (_, data) in annex.files.items():
            if not _safe_rel(rel):
                raise AnnexError(f"annex file name {rel!r} is not a path inside an archive")
            target = os.path.join(copy, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "xb") as fh:
                fh.write(data)
        yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
