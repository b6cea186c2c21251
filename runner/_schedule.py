"""The locked randomization and blinding of DESIGN §5 (``docs/randomization.md``).

Language-neutral on purpose, so an auditor can redo it by hand or in R:

* trials are the full crossing arm x stimulus x replicate; trial id = ``"{arm}|{stimulus}|{rep}"``
  with replicates numbered from 1;
* execution order = ascending lowercase hex ``SHA-256("{seed}|{trial id}")`` (UTF-8);
* the schedule's bytes are the trial ids in that order, each followed by ``\\n``; its SHA-256 is
  what ``protocol.locked`` records;
* arm code = the first 12 hex digits of ``HMAC-SHA256(secret, arm)``; the commitment recorded at
  lock is ``SHA-256(secret)``, and the secret is revealed only after scoring is sealed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from runner._errors import StudyError

ARM_CODE_HEX = 12


def trial_ids(arms: Iterable[str], stimuli: Iterable[str], replicates: int) -> list[str]:
    """Every trial of the full crossing, in spec order (not execution order)."""
    stims = list(stimuli)
    return [
        f"{arm}|{stim}|{rep}" for arm in arms for stim in stims for rep in range(1, replicates + 1)
    ]


def order_key(seed: str, trial_id: str) -> str:
    """The sort key of one trial: hex SHA-256 of ``"{seed}|{trial id}"``."""
    return hashlib.sha256(f"{seed}|{trial_id}".encode()).hexdigest()


def schedule(seed: str, ids: Iterable[str]) -> list[str]:
    """Trial ids in execution order (ascending :func:`order_key`)."""
    return sorted(ids, key=lambda t: order_key(seed, t))


def schedule_bytes(order: Sequence[str]) -> bytes:
    """The canonical bytes of a schedule: one trial id per line, each ending in a newline."""
    return "".join(f"{t}\n" for t in order).encode("utf-8")


def schedule_sha256(order: Sequence[str]) -> str:
    """SHA-256 (hex) of :func:`schedule_bytes`."""
    return hashlib.sha256(schedule_bytes(order)).hexdigest()


def arm_code(secret: bytes, arm: str) -> str:
    """The blinded code of an arm: first 12 hex digits of HMAC-SHA256(secret, arm)."""
    return hmac.new(secret, arm.encode("utf-8"), hashlib.sha256).hexdigest()[:ARM_CODE_HEX]


def commitment(secret: bytes) -> str:
    """The commitment to the blinding secret recorded at lock: SHA-256(secret), hex."""
    return hashlib.sha256(secret).hexdigest()


def subset(seed: str, item_ids: Iterable[str], n: int) -> list[str]:
    """The ``n`` items with the smallest ``SHA-256("{seed}|{item id}")``, in their given order.

    An arm's ``items = {n, seed}`` (``docs/prompts.md`` section 7).
    """
    ids = list(item_ids)
    keys = {i: hashlib.sha256(f"{seed}|{i}".encode()).hexdigest() for i in ids}
    chosen = set(sorted(ids, key=lambda i: keys[i])[:n])
    return [i for i in ids if i in chosen]


MAX_TRIALS = 10_000_000
"""The most trials a study may schedule: its trial ids are held in memory at lock and run."""


def check_size(total: int) -> None:
    """Refuse a design of more than :data:`MAX_TRIALS` trials before any id is built."""
    if total > MAX_TRIALS:
        raise StudyError(
            f"study.toml: the design crosses to {total:,} trials, more than the {MAX_TRIALS:,} "
            "a study may schedule ([design] replicates, the arms, items, variants and models "
            "multiply); use fewer, or several studies"
        )


def crossed_trial_ids(
    arms: Iterable[tuple[str, Sequence[str | None], Sequence[str], int]],
) -> list[str]:
    """Every trial of a design given per arm as (arm, models, items, replicates), in that order.

    A model None gives ``"{arm}|{item}|{rep}"``; a named model ``"{arm}|{model}|{item}|{rep}"``.
    """
    arms = list(arms)
    check_size(sum(len(models) * len(items) * reps for _, models, items, reps in arms))
    out: list[str] = []
    for arm, models, items, replicates in arms:
        for model in models:
            head = arm if model is None else f"{arm}|{model}"
            out.extend(f"{head}|{item}|{rep}" for item in items for rep in range(1, replicates + 1))
    return out
