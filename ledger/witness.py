"""A C2SP transparency-log witness: keys, cosignatures, state, the add-checkpoint rules, a client.

Specifications followed (section names in brackets):

* ``c2sp.org/tlog-witness`` [HTTP Interface, add-checkpoint]: the request body, the checks and
  their status codes (400/403/404/409/422), the ``text/x.tlog.size`` body of a 409, the
  cosignature response, and "the witness MUST persist the new checkpoint before responding",
  with the old-size check and the persisting done atomically.
* ``c2sp.org/tlog-cosignature`` [Format, Ed25519 signed message]: the cosigner key id
  ``SHA-256(name || "\\n" || 0x04 || public key)[:4]``, the ``timestamped_signature`` (a
  big-endian u64 POSIX time then the 64-byte Ed25519 signature) and the signed message
  ``cosignature/v1\\ntime <t>\\n`` followed by the checkpoint's note body.
* ``c2sp.org/signed-note`` (via :mod:`ledger._note`): the log's signatures, matched by key name
  and key id; signatures by unknown keys are ignored.

This module holds no HTTP server (that is :mod:`ledger.witness_server`, loaded only by
``ledger witness serve``); the client, :func:`add_checkpoint`, imports ``httpx`` when called.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger._errors import KeyFileError, LedgerError, NoteError
from ledger._files import os_error_advice, write_files
from ledger._keys import VerifierKey, check_key_name
from ledger._merkle import EMPTY_ROOT, verify_consistency
from ledger._note import EM_DASH, Checkpoint, open_note

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ALGORITHMS",
    "ALG_COSIGNATURE_MLDSA44",
    "ALG_COSIGNATURE_V1",
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "AddRequest",
    "AddResult",
    "CosignerKey",
    "CosignerVerifier",
    "Fork",
    "SignedCheckpoint",
    "Witness",
    "WitnessError",
    "WitnessRefusedError",
    "WitnessStateError",
    "WitnessUnreachableError",
    "add_checkpoint",
    "cosignature_message",
    "format_request",
    "new_client",
    "parse_request",
    "subtree_message",
]

#: The vkey signature type of an Ed25519 cosignature/v1 key (tlog-cosignature, Format).
ALG_COSIGNATURE_V1 = 0x04
#: The vkey signature type of an ML-DSA-44 cosigner key (tlog-cosignature 1.1, Format).
ALG_COSIGNATURE_MLDSA44 = 0x06
#: Public key and signature sizes per cosigner key type.
_PUBLIC_SIZE = {ALG_COSIGNATURE_V1: 32, ALG_COSIGNATURE_MLDSA44: 1312}
_SIGNATURE_SIZE = {ALG_COSIGNATURE_V1: 64, ALG_COSIGNATURE_MLDSA44: 2420}
#: ``ledger witness init --algorithm`` names of the key types.
ALGORITHMS = {"ed25519": ALG_COSIGNATURE_V1, "ml-dsa-44": ALG_COSIGNATURE_MLDSA44}
#: At most this many consistency proof lines (tlog-witness, add-checkpoint).
MAX_PROOF_LINES = 63
#: The content type of a 409 response's body (tlog-witness, add-checkpoint).
SIZE_CONTENT_TYPE = "text/x.tlog.size"
#: A request body larger than this is refused with 400 (a checkpoint is a few hundred bytes).
MAX_BODY = 64 * 1024
#: Tree sizes above this cannot be stored (SQLite integers are 64-bit signed): answered with 400.
MAX_SIZE = 2**63 - 1
_SKEY_PREFIX = "PRIVATE+KEY+"
KEY_FILE = "witness.key"
VKEY_FILE = "witness.vkey"
STATE_FILE = "state.db"
SCHEMA_VERSION = 1


class WitnessError(LedgerError):
    """A witness that cannot be set up, started or reached, or a request it refused."""


class WitnessStateError(WitnessError):
    """A witness directory whose key or state database is missing, foreign or damaged."""


class WitnessUnreachableError(WitnessError):
    """The witness could not be reached or did not answer (network, timeout)."""


class WitnessRefusedError(WitnessError):
    """The witness answered add-checkpoint with a status other than 200.

    ``status`` is the HTTP status, ``body`` the response text, and ``size`` the witness's
    latest cosigned tree size for a 409 (tlog-witness: the ``text/x.tlog.size`` body), else None.
    """

    def __init__(self, url: str, status: int, body: str, size: int | None = None) -> None:
        self.url = url
        self.status = status
        self.body = body
        self.size = size
        detail = f"its latest cosigned size is {size}" if size is not None else body.strip()
        super().__init__(f"witness {url} refused the checkpoint: HTTP {status} ({detail})")


# ------------------------------------------------------------------------------- keys


def _cosigner_key_id(name: str, public_key: bytes, alg: int = ALG_COSIGNATURE_V1) -> bytes:
    """tlog-cosignature, Format: ``SHA-256(<name> || "\\n" || <type> || public key)[:4]``."""
    data = name.encode() + b"\n" + bytes([alg]) + public_key
    return hashlib.sha256(data).digest()[:4]


def subtree_message(name: str, timestamp: int, checkpoint_text: str) -> bytes:
    """The ML-DSA-44 signed message (tlog-cosignature, ML-DSA-44 signed message).

    ``"subtree/v1\\n\\0"``, the cosigner name and the log origin each with a one-byte length,
    the timestamp, start 0 and end = the checkpoint's size as big-endian u64, and the root hash.
    Extension lines are not part of it.
    """
    cp = Checkpoint.from_text(checkpoint_text)
    origin, cosigner = cp.origin.encode(), name.encode()
    if not 1 <= len(cosigner) <= 255 or not 1 <= len(origin) <= 255:
        raise WitnessError("an ML-DSA-44 cosignature needs a name and origin of 1 to 255 bytes")
    return (
        b"subtree/v1\n\0"
        + bytes([len(cosigner)])
        + cosigner
        + struct.pack(">Q", timestamp)
        + bytes([len(origin)])
        + origin
        + struct.pack(">QQ", 0, cp.size)
        + cp.root
    )


def cosignature_message(checkpoint_text: str, timestamp: int) -> bytes:
    """The Ed25519 cosignature/v1 signed message (tlog-cosignature, Ed25519 signed message).

    ``cosignature/v1\\n``, ``time <timestamp>\\n``, then the checkpoint's whole note body
    (extension lines and final newline included, signature lines not).
    """
    if not 0 <= timestamp <= 2**63 - 1:
        raise WitnessError(f"cosignature timestamp {timestamp} is outside 0..2^63-1")
    return f"cosignature/v1\ntime {timestamp}\n{checkpoint_text}".encode()


@dataclass(frozen=True)
class CosignerVerifier:
    """A cosigner's public key: its name, type and key (tlog-cosignature).

    Type 0x04: Ed25519 (cosignature/v1); type 0x06: ML-DSA-44 (tlog-cosignature 1.1).
    """

    name: str
    public_key: bytes
    alg: int = ALG_COSIGNATURE_V1

    def __post_init__(self) -> None:
        check_key_name(self.name)
        size = _PUBLIC_SIZE.get(self.alg)
        if size is None:
            raise KeyFileError(f"cosigner {self.name}: unknown key type 0x{self.alg:02x}")
        if len(self.public_key) != size:
            raise KeyFileError(f"cosigner {self.name}: public key must be {size} bytes")

    @property
    def key_id(self) -> bytes:
        """The 4-byte cosigner key id."""
        return _cosigner_key_id(self.name, self.public_key, self.alg)

    @property
    def vkey(self) -> str:
        """``<name>+<8 hex key id>+<base64(type || public key)>`` (signed-note, Verifier keys)."""
        blob = base64.b64encode(bytes([self.alg]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def parse(cls, vkey: str) -> CosignerVerifier:
        """Parse a cosigner vkey (signature type 0x04), checking its key id."""
        vkey = vkey.strip()
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise KeyFileError(f"malformed witness vkey {vkey!r}: expected <name>+<id>+<key>")
        name, hex_id, blob = parts
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KeyFileError(f"witness vkey {vkey!r}: invalid base64") from exc
        if not raw or raw[0] not in _PUBLIC_SIZE or len(raw) != 1 + _PUBLIC_SIZE[raw[0]]:
            raise KeyFileError(
                f"witness vkey {vkey!r} is not a cosigner key (Ed25519: 0x04 + 32 bytes, or "
                "ML-DSA-44: 0x06 + 1312 bytes)"
            )
        key = cls(name, raw[1:], raw[0])
        if key.key_id.hex() != hex_id:
            raise KeyFileError(f"witness vkey {vkey!r}: key id does not match the name and key")
        return key

    def verify_line(self, checkpoint_text: str, line: str) -> int | None:
        """Verify one cosignature line on ``checkpoint_text``; return its timestamp.

        Returns None when the line is by another key (name or key id differ: ignored, as
        tlog-witness says a client MUST). Raises :class:`NoteError` when the line is this key's
        but malformed or does not verify.
        """
        prefix = f"{EM_DASH} "
        body = line[:-1] if line.endswith("\n") else line
        if not body.startswith(prefix):
            raise NoteError(f"cosignature line {line!r} does not start with '— '")
        name, _, blob = body[len(prefix) :].partition(" ")
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise NoteError(f"cosignature line of {name}: not base64") from exc
        if name != self.name or raw[:4] != self.key_id:
            return None
        expected = 4 + 8 + _SIGNATURE_SIZE[self.alg]
        if len(raw) != expected:
            raise NoteError(f"cosignature of {name}: {len(raw)} bytes, expected {expected}")
        (timestamp,) = struct.unpack(">Q", raw[4:12])
        if timestamp > 2**63 - 1:
            raise NoteError(f"cosignature of {name}: timestamp exceeds 2^63-1")
        try:
            if self.alg == ALG_COSIGNATURE_MLDSA44:
                from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PublicKey

                MLDSA44PublicKey.from_public_bytes(self.public_key).verify(
                    raw[12:], subtree_message(self.name, timestamp, checkpoint_text)
                )
            else:
                Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                    raw[12:], cosignature_message(checkpoint_text, timestamp)
                )
        except InvalidSignature as exc:
            raise NoteError(f"cosignature of {name} does not verify") from exc
        return int(timestamp)


class CosignerKey:
    """A witness's cosigning key: Ed25519 (cosignature/v1, type 0x04) or ML-DSA-44 (type 0x06).

    Its private key file is one line ``PRIVATE+KEY+<name>+<8 hex key id>+<base64(type || seed)>``
    (the signer-key layout of golang.org/x/mod/sumdb/note with the cosignature type byte); the
    seed is 32 bytes for both (FIPS 204 key generation seed for ML-DSA-44).
    """

    __slots__ = ("_private", "_seed", "alg", "name", "verifier")

    def __init__(self, name: str, seed: bytes, alg: int = ALG_COSIGNATURE_V1) -> None:
        """Build a key from its name, 32-byte seed and type (0x04 Ed25519, 0x06 ML-DSA-44)."""
        check_key_name(name)
        if len(seed) != 32:
            raise KeyFileError(f"witness key {name}: the seed must be 32 bytes")
        self.name = name
        self.alg = alg
        self._seed = seed
        if alg == ALG_COSIGNATURE_MLDSA44:
            from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PrivateKey

            self._private: Any = MLDSA44PrivateKey.from_seed_bytes(seed)
            public = self._private.public_key().public_bytes_raw()
        elif alg == ALG_COSIGNATURE_V1:
            self._private = Ed25519PrivateKey.from_private_bytes(seed)
            public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        else:
            raise KeyFileError(f"witness key {name}: unknown key type 0x{alg:02x}")
        self.verifier = CosignerVerifier(name, public, alg)

    @classmethod
    def generate(cls, name: str, alg: int = ALG_COSIGNATURE_V1) -> CosignerKey:
        """A fresh key from the operating system's random source."""
        return cls(name, os.urandom(32), alg)

    @property
    def vkey(self) -> str:
        """The public vkey (type 0x04) that clients configure."""
        return self.verifier.vkey

    def _skey(self) -> str:
        blob = base64.b64encode(bytes([self.alg]) + self._seed).decode()
        return f"{_SKEY_PREFIX}{self.name}+{self.verifier.key_id.hex()}+{blob}"

    def cosign(self, checkpoint_text: str, timestamp: int) -> str:
        """One cosignature line (newline included) on ``checkpoint_text`` at ``timestamp``.

        tlog-witness, add-checkpoint: the timestamp MUST NOT be zero.
        """
        if timestamp <= 0:
            raise WitnessError("a witness cosignature MUST NOT have a zero timestamp")
        if self.alg == ALG_COSIGNATURE_MLDSA44:
            signature = self._private.sign(subtree_message(self.name, timestamp, checkpoint_text))
        else:
            signature = self._private.sign(cosignature_message(checkpoint_text, timestamp))
        blob = self.verifier.key_id + struct.pack(">Q", timestamp) + signature
        return f"{EM_DASH} {self.name} {base64.b64encode(blob).decode()}\n"

    def save(self, path: Path) -> None:
        """Write the private key file (mode 0600, never overwritten) and ``.vkey`` beside it."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError as exc:
            raise WitnessStateError(
                f"witness key {path} already exists; refusing to overwrite it"
            ) from exc
        except OSError as exc:
            raise WitnessStateError(f"witness key {path}: {os_error_advice(exc)}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self._skey() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            write_files({path.with_suffix(".vkey"): self.vkey + "\n"})
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> CosignerKey:
        """Read a key file written by :meth:`save`; errors name the file."""
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError as exc:
            raise WitnessStateError(f"witness key {path}: not found") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise WitnessStateError(f"witness key {path}: unreadable ({exc})") from exc
        parts = text.removeprefix(_SKEY_PREFIX).split("+", 2)
        if not text.startswith(_SKEY_PREFIX) or len(parts) != 3:
            raise WitnessStateError(f"witness key {path}: not a PRIVATE+KEY+ line")
        name, hex_id, blob = parts
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise WitnessStateError(f"witness key {path}: invalid base64") from exc
        if len(raw) != 33 or raw[0] not in _PUBLIC_SIZE:
            raise WitnessStateError(
                f"witness key {path}: not a cosigner key (Ed25519 0x04 or "
                "ML-DSA-44 0x06, 32-byte seed)"
            )
        key = cls(name, raw[1:], raw[0])
        if key.verifier.key_id.hex() != hex_id:
            raise WitnessStateError(f"witness key {path}: key id does not match the key")
        return key


# ------------------------------------------------------------------------------- wire


@dataclass(frozen=True)
class AddRequest:
    """A parsed add-checkpoint request body (tlog-witness, add-checkpoint)."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str


class _BadRequest(Exception):
    """A request body that breaks the add-checkpoint framing: answered with 400."""


def _decimal(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or (text != "0" and text[0] == "0"):
        raise _BadRequest(f"{what} {text!r} is not a decimal with no leading zeroes")
    return int(text)


def parse_request(body: bytes) -> AddRequest:
    """Parse an add-checkpoint body: ``old N``, up to 63 base64 hashes, a blank line, a note.

    Raises :class:`WitnessError` (the server answers 400) when the framing is wrong.
    """
    try:
        return _parse_request(body)
    except _BadRequest as exc:
        raise WitnessError(f"add-checkpoint request: {exc}") from None


def _parse_request(body: bytes) -> AddRequest:
    if len(body) > MAX_BODY:
        raise _BadRequest(f"body is larger than {MAX_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRequest("body is not UTF-8") from exc
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise _BadRequest("no empty line between the proof and the checkpoint")
    lines = head.split("\n")
    first = lines[0]
    if not first.startswith("old "):
        raise _BadRequest("the first line is not 'old <size>'")
    old = _decimal(first[4:], "old size")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise _BadRequest(f"{len(lines) - 1} consistency proof lines (at most {MAX_PROOF_LINES})")
    proof: list[bytes] = []
    for number, line in enumerate(lines[1:], 1):
        try:
            digest = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _BadRequest(f"proof line {number} is not base64") from exc
        if len(digest) != 32:
            raise _BadRequest(f"proof line {number} is not a 32-byte hash")
        proof.append(digest)
    if not note:
        raise _BadRequest("no checkpoint after the empty line")
    return AddRequest(old, tuple(proof), note)


def format_request(old_size: int, proof: Sequence[bytes], note: str) -> bytes:
    """The add-checkpoint request body for ``note`` with a proof from ``old_size``."""
    if old_size < 0:
        raise WitnessError(f"old size {old_size} is negative")
    if len(proof) > MAX_PROOF_LINES:
        raise WitnessError(f"{len(proof)} proof hashes; a client MUST NOT send more than 63")
    lines = [f"old {old_size}\n", *(base64.b64encode(h).decode() + "\n" for h in proof), "\n"]
    return ("".join(lines) + note).encode("utf-8")


# ------------------------------------------------------------------------------- state

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE logs (             -- the known logs: origin -> the log's vkeys (JSON list)
  origin TEXT PRIMARY KEY, vkeys TEXT NOT NULL, added TEXT NOT NULL
);
CREATE TABLE state (            -- the latest cosigned checkpoint of each log
  origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL,
  note TEXT NOT NULL, cosigned INTEGER NOT NULL   -- note: with the log's and our signatures
);
CREATE TABLE cosigned (         -- every checkpoint ever cosigned, in order
  id INTEGER PRIMARY KEY, origin TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL,
  note TEXT NOT NULL, time INTEGER NOT NULL
);
CREATE TABLE evidence (         -- refused requests whose checkpoint signature verified
  id INTEGER PRIMARY KEY, origin TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL,
  note TEXT NOT NULL, old_size INTEGER NOT NULL, proof TEXT NOT NULL,
  status INTEGER NOT NULL, reason TEXT NOT NULL, against INTEGER, time INTEGER NOT NULL
);
CREATE INDEX cosigned_origin_size ON cosigned (origin, size);
CREATE INDEX evidence_origin_size ON evidence (origin, size);
"""


@dataclass(frozen=True)
class AddResult:
    """The answer to one add-checkpoint request: HTTP status, content type and body."""

    status: int
    content_type: str
    body: str


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint the log signed, as the witness saw it (cosigned, or refused as evidence)."""

    source: str  # "cosigned #<id>" or "refused #<id> (HTTP <status>: <reason>)"
    size: int
    root: bytes
    note: str


@dataclass(frozen=True)
class Fork:
    """Two checkpoints of one origin, both signed by the log, that cannot both be true.

    ``proven`` when they have the same size and different roots (no honest log signs both);
    otherwise the log's consistency proof from ``first`` to ``second`` failed, which shows the
    log could not prove consistency (proofs are not signed, so it is not by itself a proof).
    """

    origin: str
    first: SignedCheckpoint
    second: SignedCheckpoint
    proven: bool
    reason: str


def _now() -> int:
    return int(time.time())


class Witness:
    """A witness directory: ``witness.key`` (0600), ``witness.vkey`` and ``state.db`` (SQLite).

    Open it with :meth:`open` (refuses a directory whose key exists but whose state database
    does not: the witness would re-cosign from zero) and answer requests with
    :meth:`add_checkpoint`. One instance per thread: it holds one SQLite connection.
    """

    def __init__(
        self,
        directory: Path,
        key: CosignerKey,
        conn: sqlite3.Connection,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.directory = directory
        self.key = key
        self._conn = conn
        #: the cosignatures' time source (POSIX seconds); a fixed one keeps a demo reproducible
        self.clock: Callable[[], int] = clock or _now

    # -- set up

    @classmethod
    def init(
        cls,
        directory: str | os.PathLike[str],
        name: str,
        key: CosignerKey | None = None,
        algorithm: str = "ed25519",
    ) -> Witness:
        """Create a witness in ``directory``: a new cosigning key ``name`` and its state database.

        ``algorithm`` is ``ed25519`` (cosignature/v1) or ``ml-dsa-44`` (tlog-cosignature 1.1).
        Refuses a directory that already holds a witness key or state database. ``key`` (named
        ``name``) replaces the fresh random key: for a reproducible demonstration only.
        """
        d = Path(directory)
        check_key_name(name)
        for existing in (d / KEY_FILE, d / STATE_FILE):
            if existing.exists():
                raise WitnessStateError(
                    f"{existing} already exists; a witness is never re-initialised (its "
                    "cosignatures would restart from zero)"
                )
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise WitnessStateError(f"witness directory {d}: {os_error_advice(exc)}") from exc
        if algorithm not in ALGORITHMS:
            raise WitnessError(f"unknown witness key algorithm {algorithm!r} (ed25519, ml-dsa-44)")
        if key is None:
            key = CosignerKey.generate(name, ALGORITHMS[algorithm])
        elif key.name != name:
            raise WitnessStateError(f"witness key {key.name!r} is not named {name!r}")
        db = d / STATE_FILE
        try:
            conn = sqlite3.connect(db, isolation_level=None, timeout=60)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(  # one transaction; a vkey holds no quote character
                f"BEGIN IMMEDIATE;{_SCHEMA}INSERT INTO meta VALUES "
                f"('schema', '{SCHEMA_VERSION}'), ('vkey', '{key.vkey}');COMMIT;"
            )
            conn.close()
        except sqlite3.Error as exc:
            db.unlink(missing_ok=True)
            raise WitnessStateError(f"{db}: cannot create ({exc})") from exc
        try:
            key.save(d / KEY_FILE)  # last: a key file always has its database
        except BaseException:
            for suffix in ("", "-wal", "-shm"):
                db.with_name(db.name + suffix).unlink(missing_ok=True)
            raise
        return cls.open(d)

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], clock: Callable[[], int] | None = None
    ) -> Witness:
        """Open an initialised witness directory; errors name the file at fault.

        ``clock`` (POSIX seconds) times the cosignatures; the default is the system clock.
        """
        d = Path(directory)
        key_path, db = d / KEY_FILE, d / STATE_FILE
        if not key_path.exists():
            raise WitnessStateError(
                f"{key_path} not found: {d} is not a witness (run ledger witness init)"
            )
        key = CosignerKey.load(key_path)
        if not db.exists():
            raise WitnessStateError(
                f"{db} is missing but the witness key {key_path} exists: refusing to start, "
                "because a witness without its state would cosign checkpoints inconsistent "
                "with those it cosigned before; restore the database from a backup"
            )
        try:
            conn = sqlite3.connect(
                f"{db.absolute().as_uri()}?mode=rw",
                uri=True,
                isolation_level=None,
                timeout=60,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise WitnessStateError(f"{db}: cannot open ({exc})") from exc
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            row = conn.execute("SELECT value FROM meta WHERE key = 'vkey'").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            raise WitnessStateError(f"{db}: not a witness state database ({exc})") from exc
        if row is None or row[0] != key.vkey:
            conn.close()
            raise WitnessStateError(
                f"{db} belongs to another witness key than {key_path}; refusing to start"
            )
        return cls(d, key, conn, clock)

    def close(self) -> None:
        """Close the state database."""
        self._conn.close()

    def __enter__(self) -> Witness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def add_log(self, origin: str, vkeys: Sequence[str]) -> None:
        """Trust ``vkeys`` (Ed25519 note keys, type 0x01) for checkpoints of ``origin``.

        Adding keys to a known origin keeps its state and its earlier keys.
        """
        self.add_logs({origin: vkeys})

    def add_logs(self, logs: Mapping[str, Sequence[str]]) -> None:
        """:meth:`add_log` for many logs in one transaction (all are added or none)."""
        from ledger._store import check_origin

        parsed: dict[str, list[str]] = {}
        for origin, vkeys in logs.items():
            check_origin(origin)
            if not vkeys:
                raise WitnessError(f"log {origin}: at least one --vkey is needed")
            parsed[origin] = [VerifierKey.parse(v).vkey for v in vkeys]
        with self._transaction() as conn:
            for origin, keys in parsed.items():
                row = conn.execute("SELECT vkeys FROM logs WHERE origin = ?", (origin,)).fetchone()
                known: list[str] = json.loads(row[0]) if row else []
                merged = known + [v for v in keys if v not in known]
                conn.execute(
                    "INSERT INTO logs VALUES (?, ?, ?) ON CONFLICT (origin) "
                    "DO UPDATE SET vkeys = excluded.vkeys",
                    (origin, json.dumps(merged), str(_now())),
                )

    def logs(self) -> dict[str, list[str]]:
        """The known logs: origin -> the vkeys trusted for it."""
        rows = self._conn.execute("SELECT origin, vkeys FROM logs ORDER BY origin").fetchall()
        return {r[0]: json.loads(r[1]) for r in rows}

    def latest(self, origin: str) -> tuple[int, bytes, str] | None:
        """The latest cosigned (size, root, cosigned note) of ``origin``, or None."""
        row = self._conn.execute(
            "SELECT size, root, note FROM state WHERE origin = ?", (origin,)
        ).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]), str(row[2]))

    def _keys_for(self, origin: str) -> list[VerifierKey] | None:
        row = self._conn.execute("SELECT vkeys FROM logs WHERE origin = ?", (origin,)).fetchone()
        if row is None:
            return None
        return [VerifierKey.parse(v) for v in json.loads(row[0])]

    # -- tlog-witness, add-checkpoint

    def add_checkpoint(self, body: bytes) -> AddResult:
        """Answer one add-checkpoint request body per tlog-witness [add-checkpoint].

        Order of checks: framing (400), origin known (404), the log's signature (403), old size
        not above the checkpoint size (400); then, in one ``BEGIN IMMEDIATE`` transaction: old
        size equal to the latest cosigned size (409, ``text/x.tlog.size``), the empty-tree root
        at size 0, an empty proof from 0, the consistency proof, equal roots at equal sizes
        (422); and only then the new state is written, and committed before the cosignature is
        returned (200). Refused requests whose signature verified are kept as evidence.
        """
        try:
            request = _parse_request(body)
        except _BadRequest as exc:
            return _text(400, f"bad request: {exc}")
        origin = request.note.partition("\n")[0]
        keys = self._keys_for(origin)
        if keys is None:
            return _text(404, f"unknown log origin {origin!r}")
        try:
            note = open_note(request.note, keys)
        except NoteError as exc:
            return _text(403, f"checkpoint signature: {exc}")
        try:
            cp = Checkpoint.from_text(note.text)
        except NoteError as exc:
            return _text(400, str(exc))
        if cp.size > MAX_SIZE:
            return _text(400, f"checkpoint size {cp.size} exceeds 2^63-1")
        if request.old_size > cp.size:
            self._keep(request, cp, 400, "old size is larger than the checkpoint size", None)
            return _text(400, f"old size {request.old_size} > checkpoint size {cp.size}")
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT size, root FROM state WHERE origin = ?", (origin,)
            ).fetchone()
            size, root = (int(row[0]), bytes(row[1])) if row else (0, EMPTY_ROOT)
            against = None
            if row is not None:
                against = conn.execute(
                    "SELECT max(id) FROM cosigned WHERE origin = ?", (origin,)
                ).fetchone()[0]
            if request.old_size != size:
                self._keep(request, cp, 409, f"old size is not {size}", against)
                return AddResult(409, SIZE_CONTENT_TYPE, f"{size}\n")
            problem = _consistency_problem(request, cp, root)
            if problem:
                self._keep(request, cp, 422, problem, against)
                return _text(422, problem)
            stamp = self.clock()
            line = self.key.cosign(note.text, stamp)
            cosigned_note = request.note + line
            conn.execute(
                "INSERT INTO state VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET "
                "size = excluded.size, root = excluded.root, note = excluded.note, "
                "cosigned = excluded.cosigned",
                (origin, cp.size, cp.root, cosigned_note, stamp),
            )
            conn.execute(
                "INSERT INTO cosigned (origin, size, root, note, time) VALUES (?, ?, ?, ?, ?)",
                (origin, cp.size, cp.root, request.note, stamp),
            )
        return AddResult(200, "text/plain; charset=utf-8", line)

    def _keep(
        self, request: AddRequest, cp: Checkpoint, status: int, reason: str, against: int | None
    ) -> None:
        """Record a refused, validly signed request (tlog-witness: MAY log it as evidence)."""
        proof = json.dumps([base64.b64encode(h).decode() for h in request.proof])
        self._conn.execute(
            "INSERT INTO evidence (origin, size, root, note, old_size, proof, status, reason, "
            "against, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cp.origin,
                cp.size,
                cp.root,
                request.note,
                request.old_size,
                proof,
                status,
                reason,
                against,
                _now(),
            ),
        )

    def checkpoint_for(self, origin_hash: str) -> str | None:
        """The latest cosigned note of the log whose origin's SHA-256 hex is ``origin_hash``.

        tlog-witness [Monitor Retrieval Mechanism]; None when the witness never cosigned one.
        """
        for origin, note in self._conn.execute("SELECT origin, note FROM state"):
            if hashlib.sha256(origin.encode()).hexdigest() == origin_hash:
                return str(note)
        return None

    # -- evidence

    def forks(self) -> list[Fork]:
        """Every pair of log-signed checkpoints of one origin that cannot both be true.

        Pairs of the same size with different roots are proven forks; a refused request whose
        consistency proof from the cosigned checkpoint failed is listed as unproven.
        """
        found: list[Fork] = []
        seen: dict[tuple[str, int], dict[bytes, SignedCheckpoint]] = {}
        cosigned: dict[int, SignedCheckpoint] = {}
        rows = self._conn.execute(
            "SELECT 'c', id, origin, size, root, note, 0, '', NULL FROM cosigned "
            "UNION ALL SELECT 'e', id, origin, size, root, note, status, reason, against "
            "FROM evidence ORDER BY 1, 2"
        ).fetchall()
        for kind, rid, origin, size, root, note, status, reason, against in rows:
            source = (
                f"cosigned #{rid}" if kind == "c" else f"refused #{rid} (HTTP {status}: {reason})"
            )
            item = SignedCheckpoint(source, int(size), bytes(root), str(note))
            if kind == "c":
                cosigned[rid] = item
            roots = seen.setdefault((origin, int(size)), {})
            if item.root not in roots:
                for other in roots.values():
                    found.append(
                        Fork(
                            origin,
                            other,
                            item,
                            True,
                            f"two checkpoints of size {size} with different roots",
                        )
                    )
                roots[item.root] = item
            if kind == "e" and status == 422 and against in cosigned:
                base = cosigned[against]
                if base.size != item.size or base.root == item.root:
                    found.append(
                        Fork(
                            origin,
                            base,
                            item,
                            False,
                            f"the log's consistency proof failed: {reason}",
                        )
                    )
        return found


def _consistency_problem(request: AddRequest, cp: Checkpoint, root: bytes) -> str:
    """Why the checkpoint is not consistent with the stored (old size, root), or ''."""
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        return "a checkpoint of size 0 must have the empty tree's root hash"
    if request.old_size == 0:
        return "the proof from size 0 must be empty" if request.proof else ""
    if request.old_size == cp.size:
        if cp.root != root:
            return f"the root at size {cp.size} differs from the one cosigned before"
        return "the proof between equal sizes must be empty" if request.proof else ""
    if not verify_consistency(request.old_size, cp.size, root, cp.root, request.proof):
        return f"the consistency proof from size {request.old_size} to {cp.size} does not verify"
    return ""


def _text(status: int, message: str) -> AddResult:
    return AddResult(status, "text/plain; charset=utf-8", message + "\n")


# ------------------------------------------------------------------------------- client


def new_client(timeout: float = 30.0) -> httpx.Client:
    """An ``httpx.Client`` for witnesses: keep-alive connections and TCP_NODELAY.

    tlog-witness [HTTP Interface]: clients SHOULD use keep-alive. TCP_NODELAY keeps a request's
    body from waiting ~40 ms (Nagle's algorithm) for the acknowledgement of its headers.
    """
    import socket

    import httpx

    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(transport=transport, timeout=timeout)


def add_checkpoint(
    url: str,
    old_size: int,
    proof: Sequence[bytes],
    note: str,
    *,
    timeout: float = 30.0,
    client: object | None = None,
) -> list[str]:
    """Ask the witness at submission prefix ``url`` to cosign ``note``; return its lines.

    POSTs ``<url>/add-checkpoint`` (tlog-witness, add-checkpoint) with ``old_size`` and the
    consistency ``proof`` from it (at most 63 hashes), and returns the response's note
    signature lines, each ending in a newline. Raises :class:`WitnessRefusedError` with the
    status and body for any other status (for 409, ``size`` is the witness's latest size from
    its ``text/x.tlog.size`` body) and :class:`WitnessUnreachableError` when no answer comes.
    ``client`` may be an ``httpx.Client`` to reuse, ideally from :func:`new_client`.
    """
    import httpx

    body = format_request(old_size, proof, note)
    endpoint = url.rstrip("/") + "/add-checkpoint"
    try:
        if isinstance(client, httpx.Client):
            response = client.post(endpoint, content=body, timeout=timeout)
        else:
            with new_client() as own:
                response = own.post(endpoint, content=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise WitnessUnreachableError(f"witness {endpoint}: {type(exc).__name__}: {exc}") from exc
    text = response.text
    if response.status_code != 200:
        size = None
        if response.status_code == 409:
            ctype = response.headers.get("content-type", "").split(";")[0].strip()
            value = text[:-1] if text.endswith("\n") else text
            if ctype != SIZE_CONTENT_TYPE or not value.isascii() or not value.isdigit():
                raise WitnessRefusedError(endpoint, 409, text)
            size = int(value)
        raise WitnessRefusedError(endpoint, response.status_code, text, size)
    if not text or not text.endswith("\n"):
        raise WitnessError(f"witness {endpoint}: the response is not newline-terminated lines")
    lines = [line + "\n" for line in text[:-1].split("\n")]
    for line in lines:
        if not line.startswith(f"{EM_DASH} "):
            raise WitnessError(f"witness {endpoint}: response line {line!r} is not a signature")
    return lines
