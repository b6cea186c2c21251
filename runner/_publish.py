"""Publishing a study's log as C2SP tlog-tiles, and its trials' receipts (``docs/service.md``).

The tile format is the ledger's (:mod:`ledger._tiles`); what this module adds is the study's
policy:

* **which checkpoint** is published: the largest stored checkpoint cosigned by the quorum of the
  witnesses the study declared at lock (``protocol.locked`` ``witnessing``), with every
  cosignature it carries; a study without witnesses publishes its largest stored checkpoint;
* **which entries** are published: while the study is blind (a ``protocol.locked`` carries a
  ``blinding_commitment`` and no ``blinding.revealed`` is in the published tree) only the entry
  bundles lying wholly within the lock-time prefix (``LOCK_KINDS``: genesis, keys, artifacts,
  protocols) are published, with the blobs they reference; every hash tile is published. From
  the first checkpoint that includes ``blinding.revealed`` on, every entry bundle and blob is.
  Nothing published before unblinding names a trial, its request or its response.
* **receipts**: a trial's events (``body.trial`` is its id), each with an inclusion proof in
  the latest witnessed checkpoint that contains it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import Ledger, NoteError, is_sealed, parse_checkpoint
from runner._errors import StudyError
from runner._lock import ledger_path
from runner._witnessing import WitnessPolicy, policy_of

__all__ = [
    "LOCK_KINDS",
    "Plan",
    "StudyPublisher",
    "plan_publication",
    "publish_study",
    "trial_receipts",
]

#: Event kinds whose entries are published while a study is blind: the lock-time prefix.
LOCK_KINDS = frozenset(
    {"ledger.genesis", "key.added", "key.revoked", "artifact.locked", "protocol.locked"}
)


@dataclass(frozen=True)
class Plan:
    """What to publish: a checkpoint (its size and note) and how many leading entries."""

    size: int
    note: str
    entries_upto: int
    blind: bool
    cosigned_by: tuple[str, ...]
    policy: WitnessPolicy | None


def _policy(log: Ledger) -> WitnessPolicy | None:
    policy = None
    for event in log.events("protocol.locked"):
        found = policy_of(event.body)
        if found is not None:
            policy = found
    return policy


def _witnessed(log: Ledger, policy: WitnessPolicy | None, upto: int) -> tuple[int, str, list[str]]:
    """(size, note, cosigners) of the largest stored checkpoint the policy accepts."""
    from ledger import cosigned_by

    best: tuple[int, int, str, list[str]] | None = None
    for cp in log.checkpoints():
        if cp.size > upto:
            continue
        names: list[str] = []
        if policy is not None:
            try:
                names = cosigned_by(cp.note, [w.vkey for w in policy.witnesses])
            except NoteError:
                continue
            if len(names) < policy.quorum:
                continue
        rank = (cp.size, len(names))
        if best is None or rank >= (best[0], best[1]):
            best = (cp.size, len(names), cp.note, names)
    if best is None:
        if policy is None:
            raise StudyError(
                f"{log.path}: no stored checkpoint to publish; sign one first "
                "(`ledger checkpoint`, or lock the study)"
            )
        declared = ", ".join(w.name for w in policy.witnesses)
        raise StudyError(
            f"{log.path}: no stored checkpoint is cosigned by {policy.quorum} of the study's "
            f"witnesses ({declared}) yet; nothing published"
        )
    return best[0], best[2], best[3]


def plan_publication(log: Ledger, upto: int | None = None) -> Plan:
    """Decide the checkpoint and the entries to publish for the study ledger ``log``."""
    policy = _policy(log)
    size, note, names = _witnessed(log, policy, log.size if upto is None else upto)
    committed = any(
        "blinding_commitment" in e.body for e in log.events("protocol.locked", end=size)
    )
    revealed = any(True for _ in log.events("blinding.revealed", end=size))
    blind = committed and not revealed
    entries_upto = size
    if blind:
        entries_upto = 0
        for event in log.events(end=size):
            if event.kind not in LOCK_KINDS:
                break
            entries_upto = event.seq + 1
    return Plan(size, note, entries_upto, blind, tuple(names), policy)


class StudyPublisher:
    """Publishes one study's log into a directory, reading only new events each time."""

    def __init__(self, root: Path, directory: Path) -> None:
        """Publish the study at ``root`` into ``directory`` (created when missing)."""
        self.root = root
        self.directory = directory
        self.leaves: list[bytes] = []
        self.entries: list[bytes] = []
        self.blob_refs: list[dict[str, str]] = []

    def _published_size(self, origin: str) -> int | None:
        path = self.directory / "checkpoint"
        if not path.exists():
            return None
        try:
            cp, _ = parse_checkpoint(path.read_bytes())
        except NoteError as exc:
            raise StudyError(f"{path}: not a checkpoint ({exc})") from exc
        if cp.origin != origin:
            raise StudyError(
                f"{self.directory} publishes the log {cp.origin!r}, not this study's {origin!r}"
            )
        return cp.size

    def publish_once(self) -> Any:
        """Publish the latest witnessed checkpoint; return :class:`ledger._tiles.PublishResult`."""
        from ledger import TileError, publish

        with Ledger.open(ledger_path(self.root), readonly=True) as log:
            plan = plan_publication(log)
            for event in log.events(start=len(self.leaves), end=plan.size):
                self.leaves.append(event.leaf_hash)
                self.entries.append(event.envelope)
                self.blob_refs.append(dict(event.blobs))
            try:
                result = publish(
                    self.directory,
                    note=plan.note,
                    size=plan.size,
                    leaves=self.leaves,
                    entries=self.entries,
                    entries_upto=plan.entries_upto,
                    blob_refs=self.blob_refs,
                    blob=functools.partial(_public_blob, log),
                    published_size=self._published_size(log.origin),
                )
            except TileError as exc:
                raise StudyError(str(exc)) from exc
        result.plan = plan
        return result

    def follow(
        self,
        interval: float,
        report: Callable[[Any], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """Publish every ``interval`` seconds until ``should_stop`` (or Ctrl-C)."""
        last = None
        while not should_stop():
            try:
                result = self.publish_once()
            except StudyError as exc:
                if "yet; nothing published" not in str(exc):
                    raise
                result = None
            if result is not None and (result.size, result.entries_published) != last:
                report(result)
                last = (result.size, result.entries_published)
            time.sleep(interval)


def _public_blob(log: Ledger, digest: str) -> bytes | None:
    """A blob's stored bytes (those its address hashes), or None for a sealed one.

    A sealed blob is data the study's ``[privacy]`` policy withholds (``docs/privacy.md``):
    its stored bytes hold the content in the clear behind the salt, so it is never published;
    the entry that names it is, and its address commits to it without revealing it.
    """
    data = log.stored_blob(digest)
    return None if is_sealed(data) else data


def publish_study(root: Path, directory: Path) -> Any:
    """Publish the study at ``root`` into ``directory`` once (``ledger tiles``)."""
    return StudyPublisher(root, directory).publish_once()


def trial_receipts(root: Path, trial: str) -> list[tuple[int, str, str]]:
    """(seq, kind, receipt text) for every event of ``trial`` (``docs/service.md`` §4).

    Each receipt proves its event in the largest witnessed checkpoint (the study's quorum; any
    stored checkpoint for a study without witnesses) that contains it.
    """
    from ledger import make_receipt

    with Ledger.open(ledger_path(root), readonly=True) as log:
        events = [e for e in log.events() if e.body.get("trial") == trial]
        if not events:
            raise StudyError(f"{root}: no event names the trial {trial!r}")
        policy = _policy(log)
        size, note, _ = _witnessed(log, policy, log.size)
        last = events[-1].seq
        if last >= size:
            raise StudyError(
                f"{root}: the trial's last event (seq {last}) is not in a witnessed checkpoint "
                f"yet (the largest is of size {size}); get the study's next checkpoint cosigned "
                "(`ledger run` does at the end of a session) and try again"
            )
        out = []
        for event in events:
            proof = log.inclusion_proof(event.seq, size)
            out.append(
                (event.seq, event.kind, make_receipt(event.envelope, event.seq, proof.path, note))
            )
        return out
