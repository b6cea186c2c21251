"""Provenance: the software a study was locked with, and which model answered its requests.

- :func:`environment` is recorded in ``protocol.locked`` as ``environment``
  (``docs/study-spec.md``, "After lock"): the project's version, Python's, and the versions of
  the packages that build requests, sign the ledger and compute the results.
- :func:`model_matches` decides whether the model a response reports is the model requested
  (``docs/trials.md`` §2); :func:`model_mismatches` lists the responses and preflights whose
  reported model is not the requested one, for ``ledger status`` and ``ledger analyze``.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "ENVIRONMENT_PACKAGES",
    "ModelMismatch",
    "anthropic_name",
    "environment",
    "model_matches",
    "model_mismatches",
    "requested_model",
]

#: The distributions whose versions ``protocol.locked`` records: the SDK and HTTP client that
#: send the requests, the numeric stack the analysis depends on, and what signs, canonicalises
#: and stores the ledger, and the command line.
ENVIRONMENT_PACKAGES = (
    "anthropic",
    "httpx",
    "numpy",
    "scipy",
    "statsmodels",
    "pandas",
    "cryptography",
    "rfc8785",
    "sqlite-utils",
    "click",
)

#: The suffix of a dated snapshot of a model alias: ``-20250929`` (Anthropic) or ``-2024-08-06``.
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})")
#: A Bedrock model or inference-profile id of an Anthropic model: ``[geo.]anthropic.NAME[-vN[:M]]``.
BEDROCK_ID = re.compile(
    r"(?:(?P<geo>[a-z]{2,6}(?:-[a-z]+)?)\.)?anthropic\.(?P<name>.+?)(?:-v\d+(?::\d+)?)?"
)
#: A Vertex AI publisher model id with its version date: ``NAME@YYYYMMDD``.
VERTEX_ID = re.compile(r"(?P<name>[^@]+)@(?P<date>\d{8})")


def anthropic_name(model_id: str) -> str:
    """The Anthropic model name a Bedrock or Vertex AI model id names (``docs/trials.md`` §2).

    ``anthropic.claude-sonnet-4-5-20250929-v1:0`` and ``global.anthropic.claude-sonnet-4-5-
    20250929-v1:0`` name ``claude-sonnet-4-5-20250929``; ``claude-sonnet-4-5@20250929`` names
    ``claude-sonnet-4-5-20250929``. Any other id is its own name.
    """
    bedrock = BEDROCK_ID.fullmatch(model_id)
    if bedrock:
        return bedrock.group("name")
    vertex = VERTEX_ID.fullmatch(model_id)
    if vertex:
        return f"{vertex.group('name')}-{vertex.group('date')}"
    return model_id


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """The software environment of this process, as ``protocol.locked`` records it.

    ``{"prompt_ledger": <version>, "python": "3.11.7", "python_implementation": "CPython",
    "packages": {<name>: <version or null>, ...}}`` for the names of
    :data:`ENVIRONMENT_PACKAGES` (null: not installed).
    """
    return {
        "prompt_ledger": _version("prompt-ledger"),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": {name: _version(name) for name in ENVIRONMENT_PACKAGES},
    }


def model_matches(requested: str, reported: str | None) -> bool | None:
    """Whether a response that reports model ``reported`` answers a request for ``requested``.

    They match when they are equal, or when ``reported`` is ``requested`` followed by a dated
    snapshot suffix, ``-YYYYMMDD`` or ``-YYYY-MM-DD`` (an alias answered by its snapshot:
    ``claude-sonnet-4-5`` by ``claude-sonnet-4-5-20250929``, ``gpt-4o`` by
    ``gpt-4o-2024-08-06``). Any other suffix is a different model (``claude-sonnet-4`` is not
    ``claude-sonnet-4-5``). A Bedrock or Vertex AI id also matches the Anthropic name it names
    (:func:`anthropic_name`), as those services report it. None when the response reports no
    model.
    """
    if reported is None:
        return None
    for name in dict.fromkeys((requested, anthropic_name(requested))):
        if reported == name or (
            reported.startswith(name) and _SNAPSHOT.fullmatch(reported[len(name) :])
        ):
            return True
    return False


def requested_model(protocol: Mapping[str, Any], trial_id: str) -> str | None:
    """The model id the locked protocol requests for ``trial_id`` (None if it names none).

    A study with one ``[model]`` table requests its ``id`` for every trial; a study with
    ``[models.NAME]`` tables (``docs/prompts.md`` §5) names the model in the trial id
    (``arm|model|item|rep``) and records ``models`` (name -> parameters) in the protocol.
    """
    models = protocol.get("models")
    parts = trial_id.split("|")
    if isinstance(models, Mapping) and len(parts) in (4, 5):  # 5: with a variant
        entry = models.get(parts[1])
        model_id = entry.get("id") if isinstance(entry, Mapping) else None
        return model_id if isinstance(model_id, str) else None
    model = protocol.get("model")
    model_id = model.get("id") if isinstance(model, Mapping) else None
    return model_id if isinstance(model_id, str) else None


@dataclass(frozen=True)
class ModelMismatch:
    """A response (or preflight) whose reported model is not the one requested."""

    seq: int
    kind: str
    trial: str | None
    requested: str
    reported: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: seq, kind, trial, requested, reported."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "trial": self.trial,
            "requested": self.requested,
            "reported": self.reported,
        }


def model_mismatches(protocol: Mapping[str, Any], events: Iterable[Any]) -> list[ModelMismatch]:
    """Every ``trial.responded`` and ``run.preflight`` whose reported model is not requested.

    ``events`` are ledger events (anything with ``seq``, ``kind`` and ``body``); the requested
    id of a response is the locked one for its trial (:func:`requested_model`), that of a
    preflight the ``model`` its request carried. A response that reports no model is not
    counted (nothing to compare), nor is a simulated one (the offline simulation reports
    ``simulated/<id>`` and every report labels its data as simulated).
    """
    out: list[ModelMismatch] = []
    for event in events:
        body = event.body
        if body.get("simulated") is True:
            continue  # the simulation reports "simulated/<id>": labelled as such, not compared
        if event.kind == "trial.responded":
            trial = str(body.get("trial", ""))
            requested = requested_model(protocol, trial)
        elif event.kind == "run.preflight":
            trial = None
            requested = body.get("model") if isinstance(body.get("model"), str) else None
        else:
            continue
        reported = (
            body.get("model") if event.kind == "trial.responded" else body.get("reported_model")
        )
        if requested is None or not isinstance(reported, str):
            continue
        if model_matches(requested, reported) is False:
            out.append(ModelMismatch(event.seq, event.kind, trial, requested, reported))
    return out
