"""Build the exact request body of each trial from the locked study (``docs/trials.md`` §1)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from ledger import canonical_json
from runner.spec import Study
from runner.stimuli import check_image_for_api

#: The model parameters copied from ``[model]`` into a request, when the spec sets them.
MODEL_PARAMETERS = ("max_tokens", "temperature", "top_p", "top_k")


@dataclass(frozen=True)
class Trial:
    """One scheduled trial: its id, parts, and 1-based place in the locked schedule."""

    id: str
    arm: str
    stimulus: str
    rep: int
    position: int

    @classmethod
    def from_id(cls, trial_id: str, position: int) -> Trial:
        """Split ``"{arm}|{stimulus}|{rep}"``."""
        arm, stimulus, rep = trial_id.split("|")
        return cls(trial_id, arm, stimulus, int(rep), position)

    @property
    def custom_id(self) -> str:
        """The Message Batches ``custom_id``: ``t`` and the schedule position, 6 digits."""
        return f"t{self.position:06d}"


class RequestBuilder:
    """Compose request bodies for a study, reading each arm text and stimulus once."""

    def __init__(self, study: Study) -> None:
        """Prepare the arm texts and base64 images of ``study``."""
        self.study = study
        self._texts = {arm: study.arm_text(arm) for arm in study.arms}
        self._images: dict[str, tuple[str, str]] = {}
        for stim, path in study.stimuli.items():
            data = path.read_bytes()
            media_type, _, _ = check_image_for_api(data, name=f"stimulus {stim}")
            self._images[stim] = (media_type, base64.b64encode(data).decode("ascii"))
        self._params = {k: study.model[k] for k in MODEL_PARAMETERS if k in study.model}

    @property
    def model(self) -> str:
        """The locked model id."""
        return str(self.study.model["id"])

    def body(self, trial: Trial) -> dict[str, Any]:
        """The Messages API request object for ``trial`` (image block, then the arm text)."""
        media_type, data = self._images[trial.stimulus]
        return {
            "model": self.model,
            **self._params,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": media_type, "data": data},
                        },
                        {"type": "text", "text": self._texts[trial.arm]},
                    ],
                }
            ],
        }


def request_blob(body: dict[str, Any]) -> tuple[bytes, str]:
    """The canonical JSON bytes of a request body and their SHA-256 hex."""
    data = canonical_json(body)
    return data, hashlib.sha256(data).hexdigest()
