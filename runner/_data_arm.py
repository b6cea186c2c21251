"""Responses supplied as data: the trials of a data arm (``docs/trials.md`` §6).

An arm with ``response_from = "<item field>"`` calls no model: each of its trials takes the
item's field, as written in the locked item file, as its response (the physicians' replies of
HealthCareMagic, for example), and that response then goes through the same trial steps
(judges), scoring and analysis as a model's. ``ledger run`` records such a trial as the usual
pair of events, appended in one transaction:

- ``trial.requested`` with ``backend = "data"`` and a *source record* as its ``request`` blob,
  the canonical JSON ``{"item": <id>, "response_from": <field>, "source": "data"}``: what was
  taken and from where. It is not an API request and nothing is sent; it exists so that every
  reader of the ledger finds the trial's arm, item, position and session where it finds every
  other trial's.
- ``trial.responded`` with ``backend = "data"`` and ``format = "text"``, its ``response`` blob
  the field's text as UTF-8 bytes; no model, no request id, no HTTP status, no usage, no cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ledger import EventSpec
from runner._request import Trial, request_blob, trial_requested
from runner.spec import Study

__all__ = ["DATA_BACKEND", "DATA_FORMAT", "data_trial_events", "source_record"]

DATA_BACKEND: Final = "data"
"""The ``backend`` a data trial's events name."""
DATA_FORMAT: Final = "text"
"""The response format of a data trial: the blob is the text itself, UTF-8."""


def source_record(item: str, field: str) -> dict[str, Any]:
    """The ``request`` blob's value of a data trial: where its response was taken from."""
    return {"item": item, "response_from": field, "source": DATA_BACKEND}


def data_trial_events(
    study: Study, trial: Trial, attempt: int, session: int, item: Mapping[str, Any]
) -> tuple[EventSpec, EventSpec]:
    """The ``trial.requested`` and ``trial.responded`` of data trial ``trial``.

    ``item`` is the trial's item as written (its ``data``). The response's ``request_seq`` is
    left 0: the caller sets it to the seq the request receives, in the same transaction.
    """
    field = study.arms[trial.arm].response_from
    assert field is not None
    text = item[field]
    blob, digest = request_blob(source_record(trial.stimulus, field))
    request = trial_requested(
        trial, attempt, blob, digest, session=session, backend=DATA_BACKEND, simulated=False
    )
    response = EventSpec(
        "trial.responded",
        {
            "trial": trial.id,
            "attempt": attempt,
            "request_seq": 0,
            "request_id": None,
            "http_status": None,
            "latency_ms": None,
            "stop_reason": None,
            "usage": {},
            "cost_usd": None,
            "model": None,
            "format": DATA_FORMAT,
            "simulated": False,
            "backend": DATA_BACKEND,
        },
        {"response": str(text).encode("utf-8")},
    )
    return request, response
