"""``qr-bootstrap``: seed 001's bootstrap over (question, run) observations.

Its keys and outcomes are read by :mod:`runner._qrboot` (``docs/statistics.md``, "(question,
run) bootstrap as a registered test"): ``arm`` or ``contrast`` by statistic, the outcome
checked once the parser and ``[steps]`` are known, a contrast's arms paired by design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner._qrboot import QR_KEYS, QR_TEST, check_outcomes, check_pairing, qr_keys
from runner.statistics._base import Add, Design, StatisticSpec, declared_outcome


def _against_steps(add: Add, hypotheses: Sequence[Any], design: Design) -> None:
    check_outcomes(add, list(hypotheses), design.parser, design.steps)
    check_pairing(add, list(hypotheses), design.arms, design.replicates)


SPEC = StatisticSpec(
    QR_TEST,
    12,
    subject="arm-or-contrast",
    outcome=declared_outcome,
    takes=QR_KEYS,
    read=qr_keys,
    against_steps=_against_steps,
)
