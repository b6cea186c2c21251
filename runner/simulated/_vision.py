"""An offline, deterministic simulated vision model for tumbling-E charts.

:class:`SimulatedModel` answers the Messages API requests of ``docs/trials.md`` without a
network: it decodes the PNG of the request, *perceives* the glyphs from the pixels and
writes an answer in the JSON form of the template's output-schema component. It never
reads a truth table and never imports the stimulus generator.

Perception (:func:`perceive`): the image is thresholded, split into rows of ink by its
horizontal projection and each row into glyphs by the vertical projection; each glyph's
bounding box is sampled on a 5x5 unit grid and compared with the four E templates (a
full-height spine and three bars). A glyph is E-shaped when every cell matches the best
template; a chart whose glyphs are not (almost) all E-shaped, such as a Snellen letter
chart (C, O, S have no straight spine), is answered ``{"chart_type": "other", "rows": []}``.

Behaviour on top of perception, driven by :class:`SimParams` and by which prompt
components the text contains (recognised by the phrases in :data:`COMPONENT_MARKERS`;
a text with none of them is treated as the vehicle prompt). The defaults reproduce the
phenotypes of Experiment 1 of the PROMPT paper:

* Resolution limit (all arms): a glyph of perceived height ``h`` px is unresolved with
  probability ``1 / (1 + exp((h - resolution_h50_px) / resolution_scale_px))`` and then
  guessed. On a 1000x1400 chart the 20/10 row is 16 px (about 9 % unresolved) and the 20/13
  row 21 px (about 0.1 %), so with the decoding rule residual errors sit on row 11.
* No decoding rule: each trial collapses toward the canonical RIGHT with probability
  ``sigmoid(collapse_bias + component weights + chart term)``. The chart term is the
  perceived orientation mix weighted by ``susceptibility_*`` plus a per-image jitter, so
  the collapse rate differs between probes (bimodal: some near ceiling, others mostly
  RIGHT). In a collapsed trial a glyph is reported RIGHT with probability
  ``collapse_depth`` (a DOWN glyph is reported UP instead with ``collapse_mirror_down``);
  in other trials DOWN glyphs are reported UP with ``mirror_down_up``. Unresolved glyphs
  are guessed RIGHT with ``unresolved_right_bias``.
* Format: without the rule, a share ``format_slip_no_rule`` of answers (more without the
  output schema) leave the bare-JSON form: fenced, led or followed by prose (still
  recoverable), or truly unparseable (prose only, truncated JSON).

With the defaults and the ``prompt-tumbling-e`` template (probe set of seed 20260421, 200
replicates per probe), glyph-level accuracy over the six tumbling-E probes is about
A 98.7 % (row 11: 91 %), B 50 %, C 74 %, D 54 %, E 98.7 %; 66 % of B's wrong glyphs are RIGHT;
the Snellen control is answered "other" in every arm (paper: A 98.6, B 50.1, C 74.8).

**Single-answer questions** (:func:`answer_format`). A prompt may ask for something other
than the tumbling-E JSON; the model then answers in that vocabulary, still from the pixels and
never from a truth table. The first rule that holds decides, else the tumbling-E JSON above
(byte for byte as in ``prompt-sim-1``):

1. the prompt has an output-schema marker (:data:`COMPONENT_MARKERS`): tumbling-E JSON;
2. the prompt has two or more option lines (``A. text``, ``(B) text``, ``C) text``, a capital
   letter at the start of a line): a **letter**, the option whose text names the image's
   direction (below) as a word, else (no option names it) the option chosen by the image's
   SHA-256;
3. the prompt names ``yes``, ``no`` and ``maybe`` (as words, any case): **yes/no/maybe** to
   "is this a tumbling-E chart?": ``yes`` when at least 90 % of the symbols perceived are
   E-shaped, ``no`` when at most half are (or none is found), else ``maybe``;
4. the prompt says ``one word`` (any case) and names UP, RIGHT, DOWN and LEFT in capitals: an
   **orientation word**, the image's direction.

The *direction* of an image (:func:`image_direction`) is where its ink lies: the centroid of
darkness (255 minus grey level) relative to the image's centre, on the axis with the larger
offset (relative to the image's size): up, right, down or left of the centre gives UP, RIGHT,
DOWN or LEFT; a blank or unreadable image has none (the model then guesses). So a source image
whose content sits in its upper part, rotated by ``runner._stimuli.rotate_images``, is read as
the rotation's direction. Behaviour (:class:`SimParams` ``single_*``): with probability
``single_error`` (``single_error_rule`` when the prompt has the decoding-rule marker) the
answer is another label (shifted per image by ``single_jitter``, so some images are harder);
with ``single_unparseable`` the reply names no label at all; the answer is written bare, as
``Answer: X`` or in a sentence.

An **orientation word** (rule 4) follows the phenotype of the paper's Experiment 2 instead
(``orient_*``, since ``prompt-sim-4``): the error log-odds are those of ``orient_error``
(``orient_error_rule`` with the decoding-rule marker), plus a per-*source* offset
``orient_source_jitter`` from a hash that is the same for the four rotations of one image (so
stimuli of one source are alike, as in the paper, where the source explained most of the
variance), plus ``orient_right`` when the image's direction is the canonical RIGHT and
``orient_down`` when it is DOWN, the direction most in conflict with the canonical prior; with
both the decoding-rule and the prohibited-reasoning markers, ``orient_down_prohibited`` is
added on DOWN (the block resists the collapse there). Without the rule a wrong answer is the
canonical RIGHT with probability ``orient_canonical_right`` (else another wrong label); with it,
any wrong label alike. The reply names no label with ``orient_unparseable_vehicle`` when the
prompt has no framing marker, ``orient_unparseable_framing`` when it has the framing but none
of the rule, matched-control and prohibited-reasoning markers, else never. With the defaults
and the ``prompt-rotation`` template's 64 synthetic stimuli (20 replicates each) accuracy is
about A 77 %, B 59 %, C 58 %, D 60 %, E 71 % (DOWN: A 74 %, E 48 %), and about half of B's
wrong answers are RIGHT (paper: A 73.4 %, B 59.4 %; DOWN: A 62.5 %, E 37.5 %).

**Text requests.** A request with no image block whose text (system prompt and messages) does
not ask for the tumbling-E JSON (no output-schema marker) is answered from its text alone by
:class:`runner.simulated._text.SimulatedTextModel` (parameters :class:`TextParams`): multiple
choice, yes/no/maybe and free text, from the prompt and options, never an answer key; see that
module and ``docs/simulated.md``. Every request with an image block, and every request asking
for the tumbling-E JSON, is answered as described above, byte for byte as in ``prompt-sim-2``.

Randomness comes only from SHA-256 of the per-trial ``seed`` (``numpy`` PCG64); the same
request and seed give byte-identical responses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import math
import re
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from runner.simulated._text import SimulatedTextModel, TextParams, has_image, message_reply

__all__ = [
    "ANSWER_FORMATS",
    "COMPONENT_MARKERS",
    "ORIENTATIONS",
    "PARAMS_VERSION",
    "PerceivedGlyph",
    "Perception",
    "SimParams",
    "SimulatedModel",
    "SimulatedTextModel",
    "TextParams",
    "answer_format",
    "detect_components",
    "image_direction",
    "perceive",
]

PARAMS_VERSION: Final = "prompt-sim-4"
"""Version of the simulator and its default :class:`SimParams`; cite it in reports.

``prompt-sim-2`` adds the single-answer questions; its tumbling-E answers are those of
``prompt-sim-1``, byte for byte. ``prompt-sim-3`` answers requests without an image from their
text (:data:`runner.simulated._text.TEXT_PARAMS_VERSION`); its answers to image requests are
those of ``prompt-sim-2``, byte for byte. ``prompt-sim-4`` gives orientation-word answers the
Experiment 2 phenotype (``orient_*``); every other answer is that of ``prompt-sim-3``, byte for
byte."""

ANSWER_FORMATS: Final = ("tumbling-e-json", "multiple-choice", "yes-no-maybe", "orientation-word")
"""What the simulated model can answer (:func:`answer_format`)."""

ORIENTATIONS: Final = ("UP", "RIGHT", "DOWN", "LEFT")
"""Answer labels: the direction of the open side of an E (RIGHT is the ordinary letter)."""

_UP, _RIGHT, _DOWN, _LEFT = range(4)

COMPONENT_MARKERS: Final[dict[str, tuple[str, ...]]] = {
    "decoding_rule": ("Decoding rule:",),
    "prohibited_reasoning": ("Do not infer answers",),
    "matched_control": ("Reading note:",),
    "vehicle": ("Look at the eye chart in the image and report what you see",),
    "framing": ("You are assisting with a vision research study",),
    "output_schema": ("Answer with one JSON object", '"chart_type"'),
}
"""Distinctive phrases by which a prompt component is recognised (any phrase suffices)."""

_IMAGE_TOKENS: Final = 1600
_CACHE_SIZE: Final = 64
_INK_THRESHOLD: Final = 128
_MIN_GLYPH_PX: Final = 3
_MAX_CELL_ERROR: Final = 0.45
_E_SHARE_FOR_CHART: Final = 0.9


def _template(orientation: int) -> npt.NDArray[np.float64]:
    cells = np.zeros((5, 5), dtype=np.float64)
    if orientation in (_RIGHT, _LEFT):
        cells[:, 0 if orientation == _RIGHT else 4] = 1.0
        cells[(0, 2, 4), :] = 1.0
    else:
        cells[4 if orientation == _UP else 0, :] = 1.0
        cells[:, (0, 2, 4)] = 1.0
    return cells


_TEMPLATES: Final = np.stack([_template(o) for o in range(4)])


@dataclass(frozen=True)
class SimParams:
    """Parameters of the simulated model (defaults: :data:`PARAMS_VERSION`).

    Attributes and defaults:

    * ``noise = True``: ``False`` turns off every behavioural effect below (the answer is
      the bare perception, always well-formed JSON).
    * ``resolution_h50_px = 13.3``, ``resolution_scale_px = 1.16``: logistic probability that
      a glyph of perceived height ``h`` is unresolved and guessed (16 px: 9 %; 21 px: 0.1 %).
    * ``collapse_bias = -2.2``: log-odds of a collapse toward RIGHT for the bare vehicle
      prompt without the decoding rule (the rule present means no collapse).
    * ``weight_framing = 2.0``, ``weight_matched_control = 0.3``,
      ``weight_prohibited_reasoning = 0.1``, ``weight_output_schema = 0.3``: log-odds added
      per component present (without the rule).
    * ``susceptibility_up = -1.0``, ``susceptibility_right = 0.0``,
      ``susceptibility_down = 1.7``, ``susceptibility_left = 2.0``: chart term, weighted by
      the share of perceived glyphs of each orientation.
    * ``probe_jitter = 0.6``: scale of a per-image log-odds offset from SHA-256 of the image.
    * ``collapse_depth = 0.9``: share of glyphs reported RIGHT in a collapsed trial.
    * ``collapse_mirror_down = 0.95``: in a collapsed trial, share of DOWN glyphs reported UP
      (instead of RIGHT).
    * ``mirror_down_up = 0.2``: DOWN read as UP without the rule, in other trials.
    * ``unresolved_right_bias = 0.6``: without the rule, an unresolved glyph is guessed RIGHT
      with this probability (else uniformly among the other wrong directions); with the
      rule, uniformly among the three wrong directions.
    * ``format_slip_no_rule = 0.03``, ``format_slip_no_schema = 0.10``,
      ``format_slip_rule = 0.0``: probability that an answer leaves the bare-JSON form
      (no rule; extra when the output schema is absent; rule present).
    * ``unparseable_share = 0.35``: share of those slips that cannot be parsed at all.
    * ``single_error = 0.2``, ``single_error_rule = 0.05``: probability that a single answer
      (letter, yes/no/maybe, orientation word) is another label; the second applies when the
      prompt has the decoding-rule marker.
    * ``single_unparseable = 0.04``: probability that a single-answer reply names no label.
    * ``single_jitter = 1.5``: scale of a per-image log-odds offset (from SHA-256 of the image)
      added to the error probability, so some images are harder than others.
    * ``orient_error = 0.6``, ``orient_error_rule = 0.45``: error probability of an orientation
      word without and with the decoding-rule marker (before the terms below).
    * ``orient_source_jitter = 2.0``: scale of a per-source log-odds offset (a hash invariant
      to the four rotations of an image).
    * ``orient_right = -1.0``, ``orient_down = 1.4``: log-odds added when the image's direction
      is RIGHT (canonical) or DOWN.
    * ``orient_down_prohibited = -1.2``: added on DOWN when the prompt has both the decoding-rule
      and the prohibited-reasoning markers.
    * ``orient_canonical_right = 0.6``: without the rule, share of wrong answers that are RIGHT.
    * ``orient_unparseable_vehicle = 0.08``, ``orient_unparseable_framing = 0.03``: probability
      that the reply names no label (no framing marker; framing alone).
    """

    noise: bool = True
    resolution_h50_px: float = 13.3
    resolution_scale_px: float = 1.16
    collapse_bias: float = -2.2
    weight_framing: float = 2.0
    weight_matched_control: float = 0.3
    weight_prohibited_reasoning: float = 0.1
    weight_output_schema: float = 0.3
    susceptibility_up: float = -1.0
    susceptibility_right: float = 0.0
    susceptibility_down: float = 1.7
    susceptibility_left: float = 2.0
    probe_jitter: float = 0.6
    collapse_depth: float = 0.9
    collapse_mirror_down: float = 0.95
    mirror_down_up: float = 0.2
    unresolved_right_bias: float = 0.6
    format_slip_no_rule: float = 0.03
    format_slip_no_schema: float = 0.10
    format_slip_rule: float = 0.0
    unparseable_share: float = 0.35
    single_error: float = 0.2
    single_error_rule: float = 0.05
    single_unparseable: float = 0.04
    single_jitter: float = 1.5
    orient_error: float = 0.6
    orient_error_rule: float = 0.45
    orient_source_jitter: float = 2.0
    orient_right: float = -1.0
    orient_down: float = 1.4
    orient_down_prohibited: float = -1.2
    orient_canonical_right: float = 0.6
    orient_unparseable_vehicle: float = 0.08
    orient_unparseable_framing: float = 0.03

    def as_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (with ``"version": PARAMS_VERSION``)."""
        return {"version": PARAMS_VERSION, **asdict(self)}


@dataclass(frozen=True)
class PerceivedGlyph:
    """One glyph as seen: bounding box (x, y, width, height in px), orientation, E-likeness."""

    x: int
    y: int
    width: int
    height: int
    orientation: str
    e_shaped: bool


@dataclass(frozen=True)
class Perception:
    """What the pixels show: glyph rows (top to bottom, left to right) and the chart kind."""

    rows: tuple[tuple[PerceivedGlyph, ...], ...]
    tumbling_e: bool
    image_sha256: str
    orientation_share: tuple[float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0))


# --------------------------------------------------------------------------- perception


def _runs(mask: Any) -> list[tuple[int, int]]:
    """Half-open ``[start, stop)`` index ranges of consecutive true values of a 1-D mask."""
    padded = np.concatenate(([False], np.asarray(mask, dtype=bool), [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


def _cells(ink: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """Ink share of the central half of each cell of a 5x5 grid over the glyph's box."""
    h, w = ink.shape
    out = np.empty((5, 5), dtype=np.float64)

    def span(n: int, i: int) -> tuple[int, int]:
        lo = math.floor(n * (i + 0.25) / 5)
        hi = max(lo + 1, math.ceil(n * (i + 0.75) / 5))
        return lo, min(hi, n)

    for r in range(5):
        r0, r1 = span(h, r)
        for c in range(5):
            c0, c1 = span(w, c)
            out[r, c] = ink[r0:r1, c0:c1].mean()
    return out


def _classify(ink: npt.NDArray[np.bool_]) -> tuple[int, bool]:
    """Best E orientation of a glyph box and whether it is E-shaped at all."""
    h, w = ink.shape
    cells = _cells(ink)
    errors = np.abs(_TEMPLATES - cells).reshape(4, -1)
    best = int(np.argmin(errors.mean(axis=1)))
    square = 0.75 <= w / h <= 1.34
    return best, bool(square and errors[best].max() < _MAX_CELL_ERROR)


def perceive(png: bytes) -> Perception:
    """Find and read the glyphs of a chart image (PNG or any format Pillow reads)."""
    digest = hashlib.sha256(png).hexdigest()
    try:
        with Image.open(io.BytesIO(png)) as opened:
            image = opened.convert("RGBA")
    except (UnidentifiedImageError, OSError, ValueError):
        return Perception((), False, digest)
    background = Image.new("RGBA", image.size, (255, 255, 255, 255))
    gray = np.asarray(Image.alpha_composite(background, image).convert("L"))
    ink = gray < _INK_THRESHOLD
    rows: list[tuple[PerceivedGlyph, ...]] = []
    for y0, y1 in _runs(ink.any(axis=1)):
        band = ink[y0:y1]
        glyphs: list[PerceivedGlyph] = []
        for x0, x1 in _runs(band.any(axis=0)):
            column = band[:, x0:x1]
            ys = _runs(column.any(axis=1))
            top, bottom = ys[0][0], ys[-1][1]
            box = column[top:bottom]
            if max(box.shape) < _MIN_GLYPH_PX:
                continue  # specks are not symbols
            orientation, e_shaped = _classify(box)
            glyphs.append(
                PerceivedGlyph(
                    x0, y0 + top, x1 - x0, bottom - top, ORIENTATIONS[orientation], e_shaped
                )
            )
        if glyphs:
            rows.append(tuple(glyphs))
    flat = [g for row in rows for g in row]
    tumbling = bool(flat) and sum(g.e_shaped for g in flat) >= _E_SHARE_FOR_CHART * len(flat)
    counts = [sum(g.orientation == o for g in flat) for o in ORIENTATIONS]
    total = max(1, len(flat))
    share = (counts[0] / total, counts[1] / total, counts[2] / total, counts[3] / total)
    return Perception(tuple(rows), tumbling, digest, share)


class _PerceptionCache:
    """A bounded, thread-safe LRU of perceptions keyed by image SHA-256."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[str, Perception] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, png: bytes) -> Perception:
        key = hashlib.sha256(png).hexdigest()
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        result = perceive(png)
        with self._lock:
            self._items[key] = result
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return result


_CACHE: Final = _PerceptionCache(_CACHE_SIZE)


# --------------------------------------------------------------------------- the request


def detect_components(text: str) -> frozenset[str]:
    """Names of the prompt components whose marker phrases occur in ``text``.

    A text with none of them is treated as the vehicle prompt: ``{"vehicle"}``.
    """
    found = frozenset(
        name
        for name, phrases in COMPONENT_MARKERS.items()
        if any(phrase in text for phrase in phrases)
    )
    return found or frozenset({"vehicle"})


def _request_parts(request: dict[str, Any]) -> tuple[bytes, str]:
    """The image bytes and the prompt text of a Messages request."""
    image = b""
    texts: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
            continue
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "image" and not image:
                source = block.get("source") or {}
                try:
                    image = base64.b64decode(str(source.get("data", "")), validate=True)
                except (binascii.Error, ValueError):
                    image = b""
    return image, "\n".join(texts)


def _asks_for_tumbling_e(request: dict[str, Any]) -> bool:
    """True when the system prompt or a message has an output-schema marker."""
    system = request.get("system")
    texts = [_request_parts(request)[1]]
    if isinstance(system, str):
        texts.append(system)
    elif isinstance(system, list):
        texts.extend(
            str(b.get("text", ""))
            for b in system
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return any(p in t for t in texts for p in COMPONENT_MARKERS["output_schema"])


# --------------------------------------------------------------------------- behaviour


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _rng(seed: str) -> np.random.Generator:
    value = int.from_bytes(hashlib.sha256(seed.encode("utf-8")).digest(), "big")
    return np.random.Generator(np.random.PCG64(value))


# --------------------------------------------------------------------------- single answers

_OPTION_LINE: Final = re.compile(r"^[ \t]*(?:\(([A-Z])\)|([A-Z])[.)])[ \t]+(\S.*?)[ \t]*$", re.M)
_YES_NO_MAYBE: Final = tuple(
    re.compile(rf"(?<![A-Za-z]){w}(?![A-Za-z])", re.I) for w in ("yes", "no", "maybe")
)
_CAPITAL_WORDS: Final = tuple(re.compile(rf"(?<![A-Za-z]){w}(?![A-Za-z])") for w in ORIENTATIONS)
_NO_ANSWER: Final = "Unable to tell from this image."


def answer_format(prompt: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What the prompt asks for (rules 1-4 of the module docstring) and its option lines.

    Returns one of :data:`ANSWER_FORMATS` and, for ``multiple-choice``, the ``(letter,
    text)`` of every option line in order (a letter listed twice keeps its first line).
    """
    if any(p in prompt for p in COMPONENT_MARKERS["output_schema"]):
        return "tumbling-e-json", ()
    options: dict[str, str] = {}
    for match in _OPTION_LINE.finditer(prompt):
        options.setdefault(match.group(1) or match.group(2), match.group(3))
    if len(options) >= 2:
        return "multiple-choice", tuple(options.items())
    if all(p.search(prompt) for p in _YES_NO_MAYBE):
        return "yes-no-maybe", ()
    if "one word" in prompt.lower() and all(p.search(prompt) for p in _CAPITAL_WORDS):
        return "orientation-word", ()
    return "tumbling-e-json", ()


@lru_cache(maxsize=_CACHE_SIZE)
def _source_digest(png: bytes) -> bytes:
    """A hash of an image that its four quarter-turn rotations share (its *source*)."""
    try:
        with Image.open(io.BytesIO(png)) as opened:
            gray = opened.convert("L")
    except (UnidentifiedImageError, OSError, ValueError):
        return hashlib.sha256(png).digest()
    turns = [
        gray,
        *(
            gray.transpose(t)
            for t in (
                Image.Transpose.ROTATE_90,
                Image.Transpose.ROTATE_180,
                Image.Transpose.ROTATE_270,
            )
        ),
    ]
    return min(
        hashlib.sha256(f"{t.size[0]}x{t.size[1]}|".encode() + t.tobytes()).digest() for t in turns
    )


def image_direction(png: bytes) -> str | None:
    """The direction of an image (module docstring): where the centroid of its ink lies."""
    return _direction(png)


@lru_cache(maxsize=_CACHE_SIZE)
def _direction(png: bytes) -> str | None:
    try:
        with Image.open(io.BytesIO(png)) as opened:
            image = opened.convert("RGBA")
    except (UnidentifiedImageError, OSError, ValueError):
        return None
    background = Image.new("RGBA", image.size, (255, 255, 255, 255))
    gray = np.asarray(Image.alpha_composite(background, image).convert("L"), dtype=np.float64)
    ink = 255.0 - gray
    total = float(ink.sum())
    if total <= 0.0:
        return None
    height, width = ink.shape
    cy = float(ink.sum(axis=1) @ np.arange(height)) / total
    cx = float(ink.sum(axis=0) @ np.arange(width)) / total
    dy = (cy - (height - 1) / 2) / height
    dx = (cx - (width - 1) / 2) / width
    if abs(dx) < 1e-9 and abs(dy) < 1e-9:
        return None
    if abs(dy) >= abs(dx):
        return "UP" if dy < 0 else "DOWN"
    return "RIGHT" if dx > 0 else "LEFT"


class SimulatedModel:
    """A deterministic stand-in for a vision model on tumbling-E charts (see the module doc).

    Construct with :class:`SimParams` and :class:`TextParams` (defaults when omitted) and call
    :meth:`respond` per trial. Glyph detection is cached per image SHA-256 in a bounded LRU
    shared by all instances, so repeated stimuli cost only the behavioural draws. Requests
    without an image go to :attr:`text` (module docstring, *Text requests*).
    """

    def __init__(
        self, params: SimParams | None = None, text_params: TextParams | None = None
    ) -> None:
        self.params = params if params is not None else SimParams()
        self.text = SimulatedTextModel(text_params)

    def respond(self, request: dict[str, Any], seed: str) -> dict[str, Any]:
        """A Messages-API-shaped response object for one request; deterministic in (request, seed).

        ``request`` is the request object of ``docs/trials.md`` (an image block, then the
        arm text) or of ``docs/prompts.md`` §6; ``seed`` is the per-trial string from which all
        randomness derives. A request without an image block that does not ask for the
        tumbling-E JSON is answered by :attr:`text`.
        """
        if not has_image(request) and not _asks_for_tumbling_e(request):
            from runner.simulated import _green as simulated_green
            from runner.simulated import _pilot as simulated_pilot

            if simulated_pilot.is_pilot_request(request):
                return simulated_pilot.respond(request, seed)
            if simulated_green.is_green_request(request):
                return simulated_green.respond(request, seed)
            return self.text.respond(request, seed)
        image, prompt = _request_parts(request)
        components = detect_components(prompt)
        rng = _rng(seed)
        kind, options = answer_format(prompt)
        if kind == "tumbling-e-json":
            perception = _CACHE.get(image)
            answer = self._answer(perception, components, rng)
            text = self._format(answer, components, rng)
        else:
            text = self._single(kind, options, image, components, rng)
        return message_reply(
            request, seed, text, len(prompt) // 4 + (_IMAGE_TOKENS if image else 0)
        )

    # ----------------------------------------------------------------- reading

    def collapse_probability(self, perception: Perception, components: frozenset[str]) -> float:
        """Probability that a trial collapses toward RIGHT, for this chart and prompt."""
        p = self.params
        if not p.noise or "decoding_rule" in components or not perception.tumbling_e:
            return 0.0
        logit = p.collapse_bias
        logit += p.weight_framing * ("framing" in components)
        logit += p.weight_matched_control * ("matched_control" in components)
        logit += p.weight_prohibited_reasoning * ("prohibited_reasoning" in components)
        logit += p.weight_output_schema * ("output_schema" in components)
        susceptibility = (
            p.susceptibility_up,
            p.susceptibility_right,
            p.susceptibility_down,
            p.susceptibility_left,
        )
        logit += sum(
            s * w for s, w in zip(perception.orientation_share, susceptibility, strict=True)
        )
        jitter = int(perception.image_sha256[:8], 16) / 0xFFFFFFFF * 2.0 - 1.0
        logit += p.probe_jitter * jitter
        return _sigmoid(logit)

    def _answer(
        self, perception: Perception, components: frozenset[str], rng: np.random.Generator
    ) -> dict[str, Any]:
        if not perception.tumbling_e:
            return {"chart_type": "other", "rows": []}
        p = self.params
        rule = "decoding_rule" in components
        collapsed = bool(rng.random() < self.collapse_probability(perception, components))
        rows: list[dict[str, Any]] = []
        for number, row in enumerate(perception.rows, start=1):
            n = len(row)
            seen = np.array([ORIENTATIONS.index(g.orientation) for g in row])
            heights = np.array([g.height for g in row], dtype=np.float64)
            draws = rng.random((n, 6))
            said = seen.copy()
            if p.noise:
                z = np.clip((heights - p.resolution_h50_px) / p.resolution_scale_px, -700, 700)
                unresolved = draws[:, 0] < 1.0 / (1.0 + np.exp(z))
                wrong = (seen + 1 + np.floor(draws[:, 1] * 3).astype(int)) % 4
                if not rule:
                    biased = (draws[:, 2] < p.unresolved_right_bias) & (seen != _RIGHT)
                    wrong = np.where(biased, _RIGHT, wrong)
                said = np.where(unresolved, wrong, said)
                if not rule:
                    if collapsed:
                        to_canon = draws[:, 3] < p.collapse_depth
                        mirror = (said == _DOWN) & (draws[:, 4] < p.collapse_mirror_down)
                        said = np.where(to_canon, np.where(mirror, _UP, _RIGHT), said)
                    else:
                        mirror = (said == _DOWN) & (draws[:, 5] < p.mirror_down_up)
                        said = np.where(mirror, _UP, said)
            rows.append({"row": number, "orientations": [ORIENTATIONS[int(o)] for o in said]})
        return {"chart_type": "tumbling-e", "rows": rows}

    # ----------------------------------------------------------------- writing

    def _format(
        self, answer: dict[str, Any], components: frozenset[str], rng: np.random.Generator
    ) -> str:
        rows = answer["rows"]
        if rows:
            lines = ",\n  ".join(json.dumps(r) for r in rows)
            chart_type = json.dumps(answer["chart_type"])
            body = f'{{"chart_type": {chart_type},\n "rows": [\n  {lines}\n ]}}'
        else:
            body = json.dumps(answer)
        p = self.params
        if not p.noise:
            return body
        if "decoding_rule" in components:
            slip = p.format_slip_rule
        else:
            slip = p.format_slip_no_rule
            if "output_schema" not in components:
                slip += p.format_slip_no_schema
        draw, kind = rng.random(), rng.random()
        if draw >= slip:
            return body
        if kind < p.unparseable_share and rows:  # a rejection stays short and readable
            if kind < p.unparseable_share / 2:
                cut = max(1, int(len(body) * (0.3 + 0.5 * rng.random())))
                return body[:cut]
            return (
                "The image shows an eye chart with rows of E-shaped symbols that get smaller "
                "toward the bottom. Most of the symbols appear to face the same way as an "
                "ordinary letter E, though the lowest rows are too small to read with "
                "confidence."
            )
        style = max(0.0, kind - p.unparseable_share) / (1.0 - p.unparseable_share)
        if style < 0.5:
            return f"```json\n{body}\n```"
        if style < 0.8:
            return f"Here is my reading of the chart, row by row:\n\n{body}"
        return f"```json\n{body}\n```\n\nThe bottom rows are small; those readings are less sure."

    # ----------------------------------------------------------------- single answers

    def _single(
        self,
        kind: str,
        options: tuple[tuple[str, str], ...],
        image: bytes,
        components: frozenset[str],
        rng: np.random.Generator,
    ) -> str:
        """A single-answer reply (module docstring, rules 2-4), from the image alone."""
        digest = hashlib.sha256(image).digest()
        labels: tuple[str, ...]
        if kind == "multiple-choice":
            labels = tuple(letter for letter, _ in options)
            direction = image_direction(image)
            named = [
                letter
                for letter, text in options
                if direction is not None
                and re.search(rf"(?<![A-Za-z]){direction}(?![A-Za-z])", text, re.I)
            ]
            seen = named[0] if named else labels[digest[0] % len(labels)]
        elif kind == "yes-no-maybe":
            labels = ("yes", "no", "maybe")
            flat = [g for row in _CACHE.get(image).rows for g in row]
            share = sum(g.e_shaped for g in flat) / len(flat) if flat else 0.0
            seen = "yes" if share >= _E_SHARE_FOR_CHART else "no" if share <= 0.5 else "maybe"
        else:
            seen = image_direction(image) or ORIENTATIONS[digest[0] % 4]
            return self._orientation_word(seen, image, components, rng)
        p = self.params
        error = p.single_error_rule if "decoding_rule" in components else p.single_error
        if 0.0 < error < 1.0:  # some images are harder than others: a per-image log-odds offset
            jitter = int.from_bytes(digest[4:8], "big") / 0xFFFFFFFF * 2.0 - 1.0
            error = _sigmoid(math.log(error / (1.0 - error)) + p.single_jitter * jitter)
        draw_error, draw_other, draw_style, draw_fail = rng.random(4)
        said = seen
        if p.noise and draw_error < error:
            others = [label for label in labels if label != seen]
            said = others[int(draw_other * len(others))]
        if p.noise and draw_fail < p.single_unparseable:
            return _NO_ANSWER
        if not p.noise or draw_style < 0.5:
            return said
        if draw_style < 0.8:
            return f"Answer: {said}"
        if kind == "multiple-choice":
            return f"The answer is ({said})."
        return f"{said.capitalize()}."

    def _orientation_word(
        self, seen: str, image: bytes, components: frozenset[str], rng: np.random.Generator
    ) -> str:
        """An orientation word with the Experiment 2 phenotype (module docstring, ``orient_*``)."""
        p = self.params
        rule = "decoding_rule" in components
        base = p.orient_error_rule if rule else p.orient_error
        logit = math.log(base / (1.0 - base)) if 0.0 < base < 1.0 else None
        if logit is not None:
            jitter = int.from_bytes(_source_digest(image)[:4], "big") / 0xFFFFFFFF * 2.0 - 1.0
            logit += p.orient_source_jitter * jitter
            logit += p.orient_right * (seen == "RIGHT") + p.orient_down * (seen == "DOWN")
            if seen == "DOWN" and rule and "prohibited_reasoning" in components:
                logit += p.orient_down_prohibited
        error = base if logit is None else _sigmoid(logit)
        if "framing" not in components:
            unparseable = p.orient_unparseable_vehicle
        elif not components & {"decoding_rule", "matched_control", "prohibited_reasoning"}:
            unparseable = p.orient_unparseable_framing
        else:
            unparseable = 0.0
        draw_error, draw_other, draw_style, draw_fail = rng.random(4)
        said = seen
        if p.noise and draw_error < error:
            others = [label for label in ORIENTATIONS if label != seen]
            if not rule and seen != "RIGHT":
                share = p.orient_canonical_right
                if draw_other < share:
                    said = "RIGHT"
                else:
                    rest = [label for label in others if label != "RIGHT"]
                    said = rest[
                        min(len(rest) - 1, int((draw_other - share) / (1.0 - share) * len(rest)))
                    ]
            else:
                said = others[int(draw_other * len(others))]
        if p.noise and draw_fail < unparseable:
            return _NO_ANSWER
        if not p.noise or draw_style < 0.5:
            return said
        if draw_style < 0.8:
            return f"Answer: {said}"
        return f"The top of the image points {said}."
