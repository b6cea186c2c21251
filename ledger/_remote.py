"""A ledger reached through ``ledger serve``'s append API (``docs/service.md`` §7-9).

:class:`RemoteLedger` is the :class:`ledger.Ledger` interface over HTTP: a study whose
``ledger.store`` names ``http(s)://HOST/.../STUDY`` opens one, and every command works through
it unchanged. The client builds each envelope itself (seq and prev from the head it read,
time from its clock), signs it with the writer's key and submits it; the service checks and
sequences it. A head that moved (409) is re-read from the answer and the envelope re-signed;
a request whose answer was lost is sent again byte for byte, and the service answers an
envelope it already holds with its seq (idempotent), so each event is recorded exactly once.

A remote transaction (:meth:`RemoteLedger.transaction`) is optimistic: appends and
checkpoints inside the block are signed against the head read at the block's first write,
kept here (reads through this object see them), and submitted as one request when the block
ends: all recorded, or none when another writer appended meanwhile (then
:class:`ledger.StoreError` says so). Other writers never wait for it.

Reads of envelopes and blobs are signed requests by a key registered in the study (blinding,
``docs/service.md`` §8); the client signs them with the key it last appended with, else one
this process appended with before, else ``$PROMPT_LEDGER_KEY``, else a key in
``<user home>/keys`` that the study registered.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger._clock import FixedClock, utc_now
from ledger._envelope import BLOB_NAME_RE, ZERO_HASH, check_kind, envelope_bytes, format_time
from ledger._errors import (
    AuthorizationError,
    ConflictError,
    FormatError,
    LedgerError,
    NoteError,
    RefusedError,
    StoreError,
)
from ledger._http import TURN_ASK, TURN_HEADER, TURN_WAIT, Client, RemoteLocation, b64, reason
from ledger._keys import SigningKey, VerifierKey, user_home
from ledger._merkle import EMPTY_ROOT, fold
from ledger._note import Checkpoint
from ledger._sealed import SealPolicy, open_blob
from ledger._store import Event, KeyRecord, Ledger, StoredCheckpoint

if TYPE_CHECKING:
    from ledger._store import Clock, ConsistencyProof, EventSpec, InclusionProof

KEY_ENV = "PROMPT_LEDGER_KEY"
PAGE = 2000

#: Keys this process has appended or signed with through any remote ledger (by vkey): a later
#: remote ledger of the same study signs its reads with one of them before looking on disk.
_USED_KEYS: dict[str, SigningKey] = {}


class _Tree:
    """The log's head as this client knows it: size, last leaf hash and Merkle frontier."""

    def __init__(self, size: int, last: bytes, frontier: list[tuple[int, bytes]]) -> None:
        from ledger._store import _Head

        self.head = _Head(size, last, frontier)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Tree:
        frontier = [(int(lvl), bytes.fromhex(h)) for lvl, h in data["frontier"]]
        return cls(int(data["size"]), bytes.fromhex(data["last"]), frontier)

    def copy(self) -> _Tree:
        return _Tree(self.head.size, self.head.last, list(self.head.frontier))

    def push(self, leaf: bytes) -> None:
        self.head.push(leaf, [])

    def root(self) -> bytes:
        return fold([h for _, h in self.head.frontier]) if self.head.frontier else EMPTY_ROOT


@dataclass
class _Transaction:
    """What a remote transaction holds until its block ends.

    ``tree`` is the head with the pending events pushed; ``roots[i]`` the root after pending
    event ``i``; ``checkpoints`` (note, created, size) signed in the block.
    """

    tree: _Tree
    base: int
    base_root: bytes
    events: list[Event]
    roots: list[bytes]
    blobs: dict[str, bytes]
    checkpoints: list[tuple[str, str, int]]


class RemoteLedger(Ledger):
    """The :class:`Ledger` interface over ``ledger serve``'s append API (module doc)."""

    engine_name = "remote"

    def __init__(
        self,
        where: RemoteLocation,
        client: Client,
        head: Mapping[str, Any],
        clock: Clock | None,
        *,
        readonly: bool = False,
    ) -> None:
        """Wrap a connected client; use :meth:`Ledger.open` or :meth:`Ledger.create` instead."""
        self.path = where  # type: ignore[assignment]
        self.where = where
        self.readonly = readonly
        self.engine = "remote"
        self.origin = str(head["origin"])
        self._client = client
        self._tx: _Transaction | None = None
        self._in_transaction = False
        self._cache: list[Event] = []
        self._reader: SigningKey | None = None
        self._tree: _Tree | None = None  # the head after this client's last append
        self.conflicts = 0
        """How many times the service answered 409 and a batch was signed again."""
        self._contended = False
        """Another writer appended since this client's last append began (it lost, or the
        turn it waited for came on someone else's head): the next append asks for its turn
        before signing (``Ledger-Turn: wait``, docs/service.md §7)."""
        self.waits = 0
        """How many times this client asked for its turn before signing."""
        self._waits = True  # False once a service answered that it does not know ``wait``
        self._cache_lock = threading.RLock()
        self._clock = clock or _fixed_clock(head) or utc_now

    # ------------------------------------------------------------------ opening and closing

    @classmethod
    def connect(
        cls, where: RemoteLocation, *, clock: Clock | None = None, readonly: bool = False
    ) -> RemoteLedger:
        """Open the study's ledger behind the service. Raises :class:`StoreError` if none."""
        client = Client(where)
        try:
            answer = client.request("GET", "head", allow=(404,))
            if answer.status_code == 404:
                raise StoreError(f"{where}: {reason(answer)}")
            return cls(where, client, answer.json(), clock, readonly=readonly)
        except BaseException:
            client.close()
            raise

    @classmethod
    def create_remote(
        cls, where: RemoteLocation, *, origin: str, key: SigningKey, clock: Clock | None = None
    ) -> RemoteLedger:
        """Create the study's ledger through the service (which must allow it): the genesis."""
        from ledger._store import check_origin

        check_origin(origin)
        clock = clock or _fixed_clock({}) or utc_now
        data = envelope_bytes(
            seq=0,
            time=format_time(clock()),
            kind="ledger.genesis",
            actor=key.actor,
            prev=ZERO_HASH,
            body={"origin": origin, "vkey": key.vkey},
            blobs={},
        )
        entry = {"envelope": b64(data), "signature": b64(key.sign(data))}
        with Client(where) as client:
            client.request("POST", "create", json={"origin": origin, "entry": entry})
        _USED_KEYS[key.vkey] = key
        log = cls.connect(where, clock=clock)
        log._reader = key
        return log

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def __enter__(self) -> RemoteLedger:
        return self

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self) -> Iterator[Ledger]:
        """Keep the block's appends and checkpoints here; submit them in one request at its end.

        All of them are recorded, or none: when another writer appended after the block's
        first write, the commit is refused (:class:`StoreError`, nothing recorded) and the
        command can be run again. Reads through this ledger inside the block see them; other
        writers do not wait. Transactions do not nest.
        """
        if self.readonly:
            raise StoreError(f"{self.where} was opened read-only; open it for writing")
        if self._tx is not None or self._in_transaction:
            raise StoreError(f"{self.where}: a transaction is already open on this connection")
        self._in_transaction = True
        try:
            yield self
            tx = self._tx
            if tx is not None and (tx.events or tx.checkpoints):
                self._submit(tx.events, tx.blobs, tx.checkpoints, in_transaction=True)
                self._remember(tx.events)
                self._tree = tx.tree
        finally:
            self._tx = None
            self._in_transaction = False

    def _begin(self) -> _Transaction:
        if self._tx is None:
            tree = _Tree.from_json(self._head())
            self._tx = _Transaction(tree, tree.head.size, tree.root(), [], [], {}, [])
        return self._tx

    # ------------------------------------------------------------------ appending

    def _append_batch(
        self, specs: Sequence[EventSpec], key: SigningKey, *, genesis: bool = False
    ) -> list[Event]:
        if self.readonly:
            raise StoreError(f"{self.where} was opened read-only; open it for writing")
        for spec in specs:
            check_kind(spec.kind)
            if spec.kind == "ledger.genesis":
                raise FormatError("ledger.genesis can only be the first event of a new ledger")
        self._reader = key
        _USED_KEYS[key.vkey] = key
        if self._in_transaction:
            tx = self._begin()
            tree = tx.tree.copy()
            roots: list[bytes] = []
            events, blobs = self._sign(specs, key, tree, pending=tx.blobs, roots=roots)
            tx.tree = tree
            tx.events += events
            tx.roots += roots
            tx.blobs.update(blobs)
            return events
        # Sign against the head this client left (no extra round trip); when another writer
        # appended meanwhile the service answers 409 and the batch is re-signed on the new head.
        # The request asks for a turn: a loser's 409 comes when the service holds the study's
        # write lock for it, in the order the losers came (docs/service.md §7), and the batch
        # re-signed on that 409's head is sent back with the turn's token to the same service
        # process, which appends it under that lock: a writer cannot lose twice in a row to one
        # that signs against its own last head without a round trip.
        tree = self._tree or _Tree.from_json(self._head())
        turn: tuple[str, str | None] | None = None
        contended = False
        if self._contended and self._waits:
            tree, turn, contended = self._wait_turn(tree)
        while True:
            after = tree.copy()
            events, blobs = self._sign(specs, key, after, pending={})
            try:
                stored = self._submit(events, blobs, [], in_transaction=False, turn=turn)
            except RefusedError as exc:  # a trial rule: name the caller's spec, as the store does
                at = -1 if exc.seq is None else exc.seq - events[0].seq
                if exc.spec is not None or not 0 <= at < len(specs):
                    raise
                raise RefusedError(str(exc), spec=specs[at], rule=exc.rule, seq=exc.seq) from None
            except ConflictError as exc:
                if exc.size < 0:
                    raise
                self.conflicts += 1  # the 409 carries the new head: re-sign on it
                contended = True
                tree = _Tree.from_json(exc.head if exc.head is not None else self._head())
                turn = (exc.turn, exc.turn_url) if exc.turn else None
                continue
            self._contended = contended
            self._tree = after
            self._remember(stored)
            return stored

    def _wait_turn(self, tree: _Tree) -> tuple[_Tree, tuple[str, str | None] | None, bool]:
        """Ask for a turn before signing: (the head to sign on, the turn, another wrote).

        A writer that lost its last race would sign a batch that loses again; instead it
        queues for the study's write lock with an empty request and signs once, on the head
        its turn carries. A service that does not know ``wait`` (older than this client)
        answers 400: this client then signs first again, as before.
        """
        self.waits += 1
        try:
            self._client.request("POST", "append", json={}, headers={TURN_HEADER: TURN_WAIT})
        except ConflictError as exc:
            if exc.head is None:
                raise
            head = _Tree.from_json(exc.head)
            moved = (head.head.size, head.head.last) != (tree.head.size, tree.head.last)
            return head, (exc.turn, exc.turn_url) if exc.turn else None, moved
        except FormatError:
            self._waits = False
            return tree, None, False
        raise StoreError(f"{self.where}: the service appended nothing yet answered a turn's wait")

    def _sign(
        self,
        specs: Sequence[EventSpec],
        key: SigningKey,
        tree: _Tree,
        pending: Mapping[str, bytes],
        roots: list[bytes] | None = None,
    ) -> tuple[list[Event], dict[str, bytes]]:
        """Envelopes for ``specs`` continuing ``tree`` (pushed), signed by ``key``, and blobs.

        With ``roots``, the tree's root after each event is appended to it.
        """
        events: list[Event] = []
        blobs: dict[str, bytes] = {}
        policy = self._privacy() if any(spec.blobs for spec in specs) else None
        for spec in specs:
            seq = tree.head.size
            body = dict(spec.body)
            if spec.kind == "key.added" and isinstance(body.get("vkey"), str):
                body["vkey"] = VerifierKey.parse(body["vkey"]).vkey
            refs: dict[str, str] = {}
            given: Mapping[str, Any] = spec.blobs or {}
            if policy is not None and given:  # sealed as the store seals (docs/privacy.md)
                body, given = policy.apply(spec.kind, body, given)
            for name, value in given.items():
                if not isinstance(name, str) or not BLOB_NAME_RE.match(name):
                    raise FormatError(
                        f"blob name {name!r} of event {seq} is invalid (letters, digits, '.', "
                        "'_', '-')"
                    )
                if isinstance(value, str):
                    refs[name] = value.lower()
                elif isinstance(value, bytes | bytearray | memoryview):
                    data = bytes(value)
                    digest = hashlib.sha256(data).hexdigest()
                    if digest not in pending:
                        blobs[digest] = data
                    refs[name] = digest
                else:
                    raise FormatError(f"blob {name!r} must be bytes or a stored blob's SHA-256")
            when = format_time(self._clock())
            prev = tree.head.last.hex() if seq else ZERO_HASH
            data = envelope_bytes(
                seq=seq,
                time=when,
                kind=spec.kind,
                actor=key.actor,
                prev=prev,
                body=body,
                blobs=refs,
            )
            signature = key.sign(data)
            leaf = hashlib.sha256(b"\x00" + data).digest()
            tree.push(leaf)
            if roots is not None:
                roots.append(tree.root())
            events.append(
                Event(seq, when, spec.kind, key.actor, prev, body, refs, data, signature, leaf)
            )
        return events, blobs

    def _privacy(self) -> SealPolicy:
        """The locked privacy policy: the first ``protocol.locked``'s (a phase cannot change it).

        Read from this client's events (fetched once more while none is locked yet) and the
        open transaction's, so remote appends seal exactly the blobs the store would.
        """
        pending = self._tx.events if self._tx is not None else []
        locked = next((e for e in self._cache if e.kind == "protocol.locked"), None)
        if locked is None and not any(e.kind == "protocol.locked" for e in pending):
            self._sync()
            locked = next((e for e in self._cache if e.kind == "protocol.locked"), None)
        if locked is None:
            locked = next((e for e in pending if e.kind == "protocol.locked"), None)
        return SealPolicy() if locked is None else SealPolicy.from_protocol(locked.body)

    def _submit(
        self,
        events: Sequence[Event],
        blobs: Mapping[str, bytes],
        checkpoints: Sequence[tuple[str, str, int]],
        *,
        in_transaction: bool,
        turn: tuple[str, str | None] | None = None,
    ) -> list[Event]:
        """Send one batch; ``turn`` is (token, base URL) of the turn the service holds for it.

        Outside a transaction the request asks for a turn should it lose the race (a
        transaction's events cannot be re-signed without running its block again).
        """
        headers = {} if in_transaction else {TURN_HEADER: TURN_ASK}
        url = None
        if turn is not None:
            headers, url = {TURN_HEADER: turn[0]}, turn[1]
        payload = {
            "entries": [
                {"envelope": b64(e.envelope), "signature": b64(e.signature)} for e in events
            ],
            "blobs": {d: b64(b) for d, b in blobs.items()},
            "checkpoints": [{"note": n, "created": c} for n, c, _ in checkpoints],
        }
        try:
            answer = self._client.request("POST", "append", json=payload, headers=headers, url=url)
        except ConflictError as exc:
            if in_transaction:
                raise StoreError(
                    f"{self.where}: another writer appended while this transaction was open "
                    f"(the log now has {exc.size} events); nothing of the transaction was "
                    "recorded: run the command again"
                ) from exc
            raise
        seqs = answer.json().get("seqs", [])
        if seqs != [e.seq for e in events]:
            raise StoreError(f"{self.where}: the service recorded seqs {seqs}, not the ones sent")
        return list(events)

    def _remember(self, events: Sequence[Event]) -> None:
        with self._cache_lock:
            if events and len(self._cache) == events[0].seq:
                self._cache.extend(events)

    # ------------------------------------------------------------------ checkpoints

    def sign_checkpoint(
        self, keys: SigningKey | Sequence[SigningKey], size: int | None = None
    ) -> str:
        """Sign the checkpoint of ``size`` events here and have the service store it."""
        signers = [keys] if isinstance(keys, SigningKey) else list(keys)
        if not signers:
            raise NoteError("a checkpoint needs at least one signing key")
        n = self._check_size(size)
        if n == 0:
            raise NoteError(f"{self.where}: cannot sign a checkpoint of an empty log")
        note = Checkpoint(self.origin, n, self.root(n)).sign(signers)
        created = format_time(self._clock())
        self._reader = signers[0]
        _USED_KEYS[signers[0].vkey] = signers[0]
        if self._in_transaction:
            self._begin().checkpoints.append((note, created, n))
            return note
        self._submit([], {}, [(note, created, n)], in_transaction=False)
        return note

    def add_cosignatures(self, checkpoint_id: int, lines: Sequence[str]) -> str:
        """Have the service append witness cosignature lines to a stored checkpoint."""
        if self._tx is not None and self._tx.checkpoints:
            raise StoreError(f"{self.where}: cosign a checkpoint once its transaction is over")
        answer = self._client.request(
            "POST", "cosign", json={"id": checkpoint_id, "lines": list(lines)}
        )
        return str(answer.json()["note"])

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, oldest first (and this transaction's, last)."""
        rows = self._client.request("GET", "checkpoints").json()["checkpoints"]
        out = [
            StoredCheckpoint(
                int(r["id"]),
                int(r["size"]),
                bytes.fromhex(r["root"]),
                str(r["note"]),
                str(r["created"]),
            )
            for r in rows
        ]
        if self._tx is not None:
            for i, (note, created, n) in enumerate(self._tx.checkpoints):
                out.append(StoredCheckpoint(-1 - i, n, self.root(n), note, created))
        return out

    # ------------------------------------------------------------------ reading

    def _head(self) -> dict[str, Any]:
        data: dict[str, Any] = self._client.request("GET", "head").json()
        return data

    @property
    def size(self) -> int:
        """Number of events in the log (with this transaction's)."""
        if self._tx is not None:
            return self._tx.tree.head.size
        return int(self._head()["size"])

    def _sync(self) -> None:
        """Fetch the events this client has not seen yet (events never change once stored)."""
        with self._cache_lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        while True:
            answer = self._client.request(
                "GET",
                "events",
                params={"start": len(self._cache), "limit": PAGE},
                signer=self._read_key(),
            )
            data = answer.json()
            rows = data["events"]
            for row in rows:
                envelope = base64.b64decode(row["envelope"], validate=True)
                signature = base64.b64decode(row["signature"], validate=True)
                leaf = hashlib.sha256(b"\x00" + envelope).digest()
                event = Event._from_row((envelope, signature, leaf))
                if event.seq != len(self._cache):
                    raise StoreError(f"{self.where}: the service sent seq {event.seq} out of turn")
                self._cache.append(event)
            if not rows or len(self._cache) >= int(data["size"]):
                return

    def get(self, seq: int) -> Event:
        """Return event ``seq``. Raises :class:`LedgerError` when there is none."""
        if seq < len(self._cache):
            return self._cache[seq]
        if self._tx is not None:
            for event in self._tx.events:
                if event.seq == seq:
                    return event
        self._sync()
        if 0 <= seq < len(self._cache):
            return self._cache[seq]
        raise LedgerError(f"{self.where}: no event with seq {seq} (log size {self.size})")

    def events(
        self, kind: str | None = None, *, start: int = 0, end: int | None = None
    ) -> Iterator[Event]:
        """Iterate events in seq order, optionally of one kind and within ``[start, end)``."""
        self._sync()
        pending = self._tx.events if self._tx is not None else []
        for event in [*self._cache[start:end], *pending]:
            if event.seq < start or (end is not None and event.seq >= end):
                continue
            if kind is None or event.kind == kind:
                yield event

    def blob(self, sha256: str) -> bytes:
        """Return a blob's content by its hex SHA-256 (a sealed blob's content, unwrapped)."""
        return open_blob(self.stored_blob(sha256))

    def stored_blob(self, sha256: str) -> bytes:
        """Return a blob's stored bytes by its hex SHA-256 (a signed read)."""
        digest = sha256.lower()
        if self._tx is not None and digest in self._tx.blobs:
            return self._tx.blobs[digest]
        answer = self._client.request(
            "GET", f"blob/{digest}", signer=self._read_key(), allow=(404,)
        )
        if answer.status_code == 404:
            raise LedgerError(f"{self.where}: no blob {digest}")
        data = answer.content
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"{self.where}: the service sent other bytes for blob {digest}")
        return data

    def read_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs' contents by hex SHA-256: :meth:`blob` of each (signed reads)."""
        found: dict[str, bytes] = {}
        for digest in digests:
            key = digest.lower()
            if key not in found:
                found[key] = self.blob(key)
        return found

    def has_blob(self, sha256: str) -> bool:
        """True when a blob with this SHA-256 is stored."""
        try:
            self.stored_blob(sha256)
        except StoreError:
            raise
        except LedgerError:
            return False
        return True

    def keys(self) -> list[KeyRecord]:
        """Every key ever registered, in registration order (as committed)."""
        rows = self._client.request("GET", "keys").json()["keys"]
        return [
            KeyRecord(
                r["actor"], r["name"], r["vkey"], r["role"], int(r["added_seq"]), r["revoked_seq"]
            )
            for r in rows
        ]

    def _read_key(self) -> SigningKey:
        if self._reader is None:
            self._reader = self._find_key()
        return self._reader

    def _find_key(self) -> SigningKey:
        registered = {k.vkey for k in self.keys() if k.revoked_seq is None}
        for vkey, used in _USED_KEYS.items():
            if vkey in registered:
                return used
        candidates: list[Path] = []
        named = os.environ.get(KEY_ENV)
        if named:
            candidates.append(Path(named))
        keydir = user_home() / "keys"
        if keydir.is_dir():
            candidates += sorted(keydir.glob("*.key"))
        for path in candidates:
            try:
                key = SigningKey.load(path)
            except LedgerError:
                continue
            if key.vkey in registered:
                return key
        raise AuthorizationError(
            f"{self.where}: reading events and blobs needs a key the study registered (the "
            f"service serves them only to the study's own keys while blinding holds); none in "
            f"${KEY_ENV} or {keydir}"
        )

    # ------------------------------------------------------------------ Merkle tree

    def root(self, size: int | None = None) -> bytes:
        """Merkle root of the first ``size`` events (default: the whole log)."""
        n = self._check_size(size)
        tx = self._tx
        if tx is not None and n >= tx.base:
            return tx.roots[n - tx.base - 1] if n > tx.base else tx.base_root
        data = self._client.request("GET", "root", params={"size": n}).json()
        return bytes.fromhex(data["root"])

    def _root(self, n: int) -> bytes:
        return self.root(n)

    def inclusion_proof(self, index: int, size: int | None = None) -> InclusionProof:
        """RFC 9162 inclusion proof of event ``index`` in the tree of ``size`` (default: now)."""
        from ledger._store import InclusionProof

        params = {"index": index, **({} if size is None else {"size": size})}
        data = self._client.request("GET", "proof/inclusion", params=params).json()
        return InclusionProof(
            int(data["leaf_index"]),
            int(data["tree_size"]),
            bytes.fromhex(data["leaf_hash"]),
            bytes.fromhex(data["root"]),
            tuple(bytes.fromhex(p) for p in data["path"]),
        )

    def consistency_proof(self, old: int, new: int | None = None) -> ConsistencyProof:
        """RFC 9162 consistency proof from the tree of ``old`` to ``new`` events (default: now)."""
        from ledger._store import ConsistencyProof

        params = {"old": old, **({} if new is None else {"new": new})}
        data = self._client.request("GET", "proof/consistency", params=params).json()
        return ConsistencyProof(
            int(data["old_size"]),
            int(data["new_size"]),
            bytes.fromhex(data["old_root"]),
            bytes.fromhex(data["new_root"]),
            tuple(bytes.fromhex(p) for p in data["path"]),
        )

    def checkpoint(self, size: int | None = None) -> Checkpoint:
        """The unsigned checkpoint of the first ``size`` events (default: the whole log)."""
        n = self._check_size(size)
        return Checkpoint(self.origin, n, self.root(n))

    def check_integrity(self) -> None:
        """Refuse a log whose stored checkpoints reach past its last event (a rolled-back store).

        The pages of the store are the service's database's to check.
        """
        size = self.size
        top = max((cp.size for cp in self.checkpoints()), default=0)
        if top > size:
            raise StoreError(
                f"{self.where}: a stored checkpoint has tree size {top}, but the log has {size} "
                f"events: the last {top - size} event(s) are missing; nothing was appended"
            )

    def copy_to(self, target: Path) -> Path:
        """Write what the service serves into a new SQLite ledger at ``target``; return it.

        Every envelope, signature and blob goes through :meth:`Ledger.append_signed` (so each
        is checked again here), then every checkpoint with its creation time, its witness
        cosignatures added as they are stored. The independent verifier (``verify/``) reads
        the copy: it checks what the service served (``ledger report``'s verification).
        """
        from ledger._note import parse_note

        self._sync()
        copy = Ledger._create_empty(target, self.origin)
        try:
            registered = {(k.name, VerifierKey.parse(k.vkey).key_id) for k in self.keys()}
            for start in range(0, len(self._cache), 500):
                chunk = self._cache[start : start + 500]
                blobs = {d: self.blob(d) for e in chunk for d in e.blobs.values()}
                copy.append_signed([(e.envelope, e.signature) for e in chunk], blobs)
            for cp in self.checkpoints():
                note = parse_note(cp.note)
                own = [s.line for s in note.signatures if (s.name, s.key_id) in registered]
                others = [s.line for s in note.signatures if (s.name, s.key_id) not in registered]
                cid, _ = copy.store_checkpoint(note.text + "\n" + "".join(own), cp.created)
                if others:
                    copy.add_cosignatures(cid, others)
        finally:
            copy.close()
        return target

    @property
    def db(self) -> Any:
        """Not available: a remote ledger has no local database."""
        raise StoreError(f"{self.where}: a ledger behind `ledger serve` has no local database")


def _fixed_clock(head: Mapping[str, Any]) -> Clock | None:
    """``$PROMPT_LEDGER_FIXED_CLOCK``, continuing after the head's last event or checkpoint.

    The same rule as the local engines (``ledger/_store.py``), so a study run through the
    service writes the same times, and so the same bytes, as one run locally.
    """
    from datetime import UTC, datetime, timedelta

    from ledger._store import FIXED_CLOCK_ENV

    value = os.environ.get(FIXED_CLOCK_ENV)
    if not value:
        return None
    try:
        start = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise StoreError(f"${FIXED_CLOCK_ENV}: {value!r} is not an ISO 8601 time") from None
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    for text in (head.get("time"), head.get("checkpoint_time")):
        if text:
            seen = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            start = max(start, seen + timedelta(milliseconds=1))
    return FixedClock(start)
