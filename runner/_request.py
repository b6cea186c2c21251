"""Build the exact request body of each trial from the locked study (``docs/prompts.md``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ledger import EventSpec, canonical_json
from runner._render import Renderer
from runner.spec import Study

#: The model parameters a request may carry (``docs/prompts.md`` section 5).
MODEL_PARAMETERS = ("max_tokens", "temperature", "top_p", "top_k", "stop_sequences")


@dataclass(frozen=True)
class Trial:
    """One scheduled trial: its id, parts, and 1-based place in the locked schedule.

    ``model`` is the model's name in a study with ``[models.<NAME>]`` tables (trial id
    ``"{arm}|{model}|{stimulus}|{rep}"``), else None (``"{arm}|{stimulus}|{rep}"``).
    """

    id: str
    arm: str
    stimulus: str
    rep: int
    position: int
    model: str | None = None
    variant: str | None = None

    @classmethod
    def from_id(cls, trial_id: str, position: int) -> Trial:
        """Split a trial id into its parts.

        ``"{arm}|{stimulus}|{rep}"``, ``"{arm}|{model}|{stimulus}|{rep}"`` or the five-part
        ``"{arm}|{model}|{stimulus}|{variant}|{rep}"`` of a study with variants (an empty model
        part: the one ``[model]``, ``docs/variants.md`` section 4).
        """
        parts = trial_id.split("|")
        if len(parts) == 5:
            arm, model, stimulus, variant, rep = parts
            return cls(trial_id, arm, stimulus, int(rep), position, model or None, variant)
        if len(parts) == 4:
            arm, model, stimulus, rep = parts
            return cls(trial_id, arm, stimulus, int(rep), position, model)
        arm, stimulus, rep = parts
        return cls(trial_id, arm, stimulus, int(rep), position)

    @property
    def custom_id(self) -> str:
        """The Message Batches ``custom_id``: ``t`` and the schedule position, 6 digits."""
        return f"t{self.position:06d}"


class RequestBuilder:
    """Compose request bodies for a study (:class:`runner._render.Renderer` underneath)."""

    def __init__(self, study: Study) -> None:
        """Read the study's texts, templates, items and images once."""
        self.study = study
        self.renderer = Renderer(study)

    @property
    def model(self) -> str:
        """The locked model id (the first model's, in a study with several)."""
        return self.study.model_specs()[0].id

    def model_id(self, trial: Trial) -> str:
        """The model id a trial's request names."""
        return self.renderer.models[trial.model].id

    def body(self, trial: Trial) -> dict[str, Any]:
        """The Messages API request object for ``trial`` (``docs/prompts.md`` section 6)."""
        return self.renderer.body(
            trial.arm,
            trial.model,
            trial.stimulus,
            trial.variant,
            self.renderer.prior_values.get(trial.id),
        )


def request_blob(body: dict[str, Any]) -> tuple[bytes, str]:
    """The canonical JSON bytes of a request body and their SHA-256 hex."""
    data = canonical_json(body)
    return data, hashlib.sha256(data).hexdigest()


def trial_requested(
    trial: Trial,
    attempt: int,
    blob: bytes,
    digest: str,
    *,
    session: int,
    backend: str,
    simulated: bool,
    batch: bool = False,
) -> EventSpec:
    """The ``trial.requested`` event of one attempt (``docs/trials.md`` §3).

    ``blob`` is the request (or, for a data arm, its source record, §6) and ``digest`` its
    SHA-256.
    """
    return EventSpec(
        "trial.requested",
        {
            "trial": trial.id,
            "arm": trial.arm,
            **({"model": trial.model} if trial.model is not None else {}),
            "stimulus": trial.stimulus,
            **({"variant": trial.variant} if trial.variant is not None else {}),
            "rep": trial.rep,
            "position": trial.position,
            "attempt": attempt,
            "request_sha256": digest,
            "session": session,
            "backend": backend,
            "simulated": simulated,
            **({"batch": True} if batch else {}),
        },
        {"request": blob},
    )
