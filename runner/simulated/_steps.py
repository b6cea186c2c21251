"""The simulated answers to step calls (``docs/simulated.md`` §3), version ``prompt-sim-steps-4``.

The simulated backend answers a request whose seed names a step call (``"{seed}|step:...|
{attempt}"``, ``docs/trials.md`` §5) here, from the request body and that seed alone; like the
rest of the simulation it never reads an item file, a truth table or a score. Its answers depend
on the lines of the final user text:

- **judge**: a line starting ``Reference:`` and a line starting ``Candidate:``. The verdict is
  ``correct`` when every word (lower-cased letters and digits) of the reference line occurs in
  the candidate text (from the ``Candidate:`` line to the end, or to the next ``Reference:``
  line), else ``incorrect``; with probability 0.15 the judge errs (the other verdict), and with
  probability 0.05 it answers ``It depends on the context.`` (no verdict: unparseable).
- **rewriter**: a line starting ``Text:``. The rest of the text from there, with ``The patient``
  / ``the patient`` written ``I``, `` his `` / `` her `` written `` my ``, and ``is`` / ``has``
  after ``I`` written ``am`` / ``have``; with probability 0.05 the reply is empty.
- **semantic verifier** (``docs/prompts.md`` §8.6): the words ``retained or lost``, a line
  starting ``Original:`` and one starting ``Rewrite:``. ``lost`` when the rewrite (the text
  from its line to the end, or to the ``Original:`` line) is empty or leaves out a number
  (a run of digits, with an optional decimal part) of the original (the text from its line to
  the ``Rewrite:`` line, or to the end), or with probability 0.1; else ``retained``.
- **screening**: the words ``include or exclude``. ``include`` with probability 0.85, else
  ``exclude``.
- **differential-diagnosis steps** (``docs/scoring.md`` §12), each with a JSON reply
  (with probability 0.05 the reply is ``I cannot tell.``: unparseable):

  - *list*: a line starting ``Diagnoses in:``; the text from there to the end. Each line's
    part after its last ``:`` is split at ``,``, ``;``, `` or `` and `` and ``; each piece is
    trimmed of white space and a final ``.``; empty pieces are dropped:
    ``{"diagnoses": [...]}``; with probability 0.1 the last piece is left out.
  - *match*: lines starting ``Listed:``, ``Plausible set:``, ``Highly likely set:`` and
    ``Safety-critical set:``, each a JSON array. Two diagnoses *match* when their lower-cased
    words are equal or one's words are a run of the other's (``migraine`` and ``migraine
    without aura``). ``plausible``: the listed diagnoses matching one of the plausible set;
    ``highly_likely`` / ``safety_critical``: the entries of those sets matching a listed one;
    with probability 0.1 the last of ``plausible`` is left out.
  - *extractor*: a line starting ``Extract from:``; the sentences of the text from there
    (ending at ``.``, ``!`` or ``?``): ``{"demographics", "subjective", "objective"}``, each the
    sentences (joined by a space) naming an age or sex (``year``, ``old``, ``man``, ``woman``,
    ``male``, ``female``, ``boy``, ``girl``), holding ``consistent with``, a digit or the word
    ``findings`` / ``test`` / ``exam``, and the others; an empty member is ``not stated``.
  - *reference*: a line starting ``Case for reference sets:``; the text from there. The
    *candidates* are the pieces (split as for *list*) of each sentence that contains
    ``consistent with:``, after it. ``plausible``: the candidates; ``highly_likely``: the first
    two; ``safety_critical``: those containing a word of :data:`SEVERE`. With probability 0.3
    one candidate (chosen by a draw) is left out of all three: models disagree, and an
    element-wise vote settles it.
  - *grounding*: lines starting ``Diagnoses to ground:`` (a JSON array) and ``Input:`` (the
    text from there to the end). ``grounded``: the diagnoses sharing a word of four or more
    letters with the input; ``indirect``: the others.
  - *uncertainty*: a line starting ``Uncertainty of:``; ``uncertain`` when the text from there
    holds one of the words ``may``, ``might``, ``possible``, ``possibly``, ``unclear``,
    ``perhaps``, ``cannot``, else ``certain``.
- **per-model lists** (a test fixture for set-valued votes): a line starting ``Lists by
  model:`` followed by a JSON object from model ids to arrays of strings; the reply is
  ``{"diagnoses": [...]}``, the array under the request's model id (empty when absent). So each
  simulated model "spells" the diagnoses as the study's data says it does.
- **synonym matcher** (``docs/prompts.md`` §8.3): a line starting ``Synonyms among:``; the
  following non-empty lines are the elements. Two elements are synonyms when their letters and
  digits are equal (``m.i.`` and ``mi``) or one's equal the initials of the other's words (two
  or more words: ``mi`` and ``myocardial infarction``), transitively; the reply is
  ``{"groups": [...]}``, each group of two or more elements written ``a|b|...`` (members in
  the listed order, groups in order of their first member). Never wrong, never unparseable.
- anything else: the first line of the text.

Every draw is ``SHA-256("prompt-sim-steps|{seed}|" + canonical request)`` read as uniforms, so
the model (its id is in the request) and the attempt (in the seed) change the draws, and the
same request and seed always give the same reply. Replies have the Messages API shape, with
``model`` ``simulated/<id>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final

from ledger import canonical_json
from runner.simulated._text import last_message_text, message_reply

__all__ = ["VERSION", "is_step_seed", "respond"]

VERSION = "prompt-sim-steps-4"
_WORDS = re.compile(r"[a-z0-9]+")
SEVERE: Final = frozenset(
    {
        "meningitis",
        "haemorrhage",
        "hemorrhage",
        "infarction",
        "embolism",
        "sepsis",
        "dissection",
        "appendicitis",
        "ectopic",
        "torsion",
        "stroke",
        "pneumothorax",
        "tamponade",
        "tumour",
        "tumor",
        "cancer",
        "obstruction",
        "perforation",
    }
)
"""Words that make a reference candidate safety-critical for the simulated reference builder."""
_HEDGES: Final = frozenset({"may", "might", "possible", "possibly", "unclear", "perhaps", "cannot"})
_SPLIT: Final = re.compile(r",|;| or | and ")


def is_step_seed(seed: str) -> bool:
    """Whether ``seed`` is a step call's (the runner's ``"{seed}|{call id}|{attempt}"``)."""
    return "|step:" in seed


def _draws(request: dict[str, Any], seed: str) -> list[float]:
    digest = hashlib.sha256(
        b"prompt-sim-steps|" + seed.encode("utf-8") + b"|" + canonical_json(request)
    ).digest()
    return [int.from_bytes(digest[i : i + 4], "big") / 2**32 for i in range(0, 16, 4)]


def _pieces(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        tail = line.rsplit(":", 1)[-1]
        for piece in _SPLIT.split(tail):
            piece = piece.strip().rstrip(".").strip()
            if piece:
                out.append(piece)
    return out


def _labelled(lines: list[str], label: str) -> int | None:
    return next((i for i, line in enumerate(lines) if line.startswith(label)), None)


def _array(line: str) -> list[str]:
    try:
        value = json.loads(line.split(":", 1)[1])
    except (ValueError, IndexError):
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _same(a: str, b: str) -> bool:
    x, y = _WORDS.findall(a.lower()), _WORDS.findall(b.lower())
    if not x or not y:
        return False
    short, long = (x, y) if len(x) <= len(y) else (y, x)
    return any(long[i : i + len(short)] == short for i in range(len(long) - len(short) + 1))


def ddx_answer(text: str, draws: list[float]) -> str | None:
    """The reply to a differential-diagnosis step (module docstring), or None if it is none."""
    lines = text.split("\n")
    at = {
        label: _labelled(lines, label)
        for label in (
            "Diagnoses in:",
            "Listed:",
            "Plausible set:",
            "Highly likely set:",
            "Safety-critical set:",
            "Case for reference sets:",
            "Diagnoses to ground:",
            "Input:",
            "Uncertainty of:",
        )
    }
    extract = _labelled(lines, "Extract from:")
    kinds = [
        at["Diagnoses in:"],
        at["Listed:"],
        at["Case for reference sets:"],
        at["Diagnoses to ground:"],
        at["Uncertainty of:"],
        extract,
    ]
    if all(k is None for k in kinds):
        return None
    if draws[1] < 0.05:
        return "I cannot tell."
    if extract is not None:
        text_from = "\n".join(lines[extract:])[len("Extract from:") :]
        parts: dict[str, list[str]] = {"demographics": [], "subjective": [], "objective": []}
        for sentence in re.split(r"(?<=[.!?])\s+", text_from.strip()):
            said = set(_WORDS.findall(sentence.lower()))
            if said & {"year", "years", "old", "man", "woman", "male", "female", "boy", "girl"}:
                parts["demographics"].append(sentence)
            elif (
                "consistent with" in sentence
                or said & {"findings", "test", "exam"}
                or any(ch.isdigit() for ch in sentence)
            ):
                parts["objective"].append(sentence)
            elif sentence:
                parts["subjective"].append(sentence)
        return json.dumps({k: " ".join(v) or "not stated" for k, v in parts.items()})
    if at["Listed:"] is not None:
        listed = _array(lines[at["Listed:"]])
        sets = {
            name: _array(lines[i]) if i is not None else []
            for name, i in (
                ("plausible", at["Plausible set:"]),
                ("highly_likely", at["Highly likely set:"]),
                ("safety_critical", at["Safety-critical set:"]),
            )
        }
        plausible = [d for d in listed if any(_same(d, r) for r in sets["plausible"])]
        if draws[0] < 0.1 and plausible:
            plausible = plausible[:-1]
        return json.dumps(
            {
                "plausible": plausible,
                "highly_likely": [
                    r for r in sets["highly_likely"] if any(_same(d, r) for d in listed)
                ],
                "safety_critical": [
                    r for r in sets["safety_critical"] if any(_same(d, r) for d in listed)
                ],
            }
        )
    if at["Diagnoses in:"] is not None:
        i = at["Diagnoses in:"]
        found = _pieces("\n".join(lines[i:])[len("Diagnoses in:") :])
        if draws[0] < 0.1 and found:
            found = found[:-1]
        return json.dumps({"diagnoses": found})
    if at["Case for reference sets:"] is not None:
        case = "\n".join(lines[at["Case for reference sets:"] :])
        candidates: list[str] = []
        for sentence in re.split(r"(?<=[.!?])\s+", case):
            if "consistent with:" in sentence:
                candidates += _pieces(sentence.split("consistent with:", 1)[1])
        if draws[0] < 0.3 and candidates:
            candidates.pop(int(draws[2] * len(candidates)))
        return json.dumps(
            {
                "plausible": candidates,
                "highly_likely": candidates[:2],
                "safety_critical": [
                    c for c in candidates if SEVERE & set(_WORDS.findall(c.lower()))
                ],
            }
        )
    if at["Diagnoses to ground:"] is not None:
        listed = _array(lines[at["Diagnoses to ground:"]])
        start = at["Input:"]
        source = "\n".join(lines[start:]) if start is not None else ""
        known = {w for w in _WORDS.findall(source.lower()) if len(w) >= 4}
        grounded = [d for d in listed if known & set(_WORDS.findall(d.lower()))]
        return json.dumps(
            {"grounded": grounded, "indirect": [d for d in listed if d not in grounded]}
        )
    assert at["Uncertainty of:"] is not None
    said = set(_WORDS.findall("\n".join(lines[at["Uncertainty of:"] :]).lower()))
    return "uncertain" if said & _HEDGES else "certain"


def _per_model(text: str, model: str) -> str | None:
    """The per-model list or synonym-matcher reply (module docstring), or None."""
    lines = text.split("\n")
    for line in lines:
        if line.startswith("Lists by model:"):
            try:
                table = json.loads(line[len("Lists by model:") :])
            except ValueError:
                return None
            chosen = table.get(model, []) if isinstance(table, dict) else []
            return json.dumps({"diagnoses": chosen})
    start = next((i for i, line in enumerate(lines) if line.startswith("Synonyms among:")), None)
    if start is None:
        return None
    elements = [x.strip() for x in lines[start + 1 :] if x.strip()]
    compact = ["".join(_WORDS.findall(x.lower())) for x in elements]
    initials = [
        "".join(w[0] for w in _WORDS.findall(x.lower()))
        if len(_WORDS.findall(x.lower())) > 1
        else None
        for x in elements
    ]
    parent = list(range(len(elements)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(elements)):
        for j in range(i + 1, len(elements)):
            if compact[i] == compact[j] or initials[i] == compact[j] or (initials[j] == compact[i]):
                parent[root(j)] = root(i)
    groups: dict[int, list[str]] = {}
    for i, x in enumerate(elements):
        groups.setdefault(root(i), []).append(x)
    return json.dumps({"groups": ["|".join(g) for g in groups.values() if len(g) > 1]})


def answer(text: str, draws: list[float]) -> str:
    """The reply text for a step request's user ``text`` (module docstring)."""
    ddx = ddx_answer(text, draws)
    if ddx is not None:
        return ddx
    lines = text.split("\n")
    ref = next((i for i, line in enumerate(lines) if line.startswith("Reference:")), None)
    cand = next((i for i, line in enumerate(lines) if line.startswith("Candidate:")), None)
    if ref is not None and cand is not None:
        if draws[1] < 0.05:
            return "It depends on the context."
        reference = set(_WORDS.findall(lines[ref][len("Reference:") :].lower()))
        end = ref if ref > cand else len(lines)
        candidate_text = "\n".join(lines[cand:end])[len("Candidate:") :]
        candidate = set(_WORDS.findall(candidate_text.lower()))
        correct = bool(reference) and reference <= candidate
        if draws[0] < 0.15:
            correct = not correct
        return "correct" if correct else "incorrect"
    verdict = _semantic_verdict(text, lines, draws)
    if verdict is not None:
        return verdict
    start = next((i for i, line in enumerate(lines) if line.startswith("Text:")), None)
    if start is not None:
        if draws[0] < 0.05:
            return ""
        body = "\n".join(lines[start:])[len("Text:") :].strip()
        body = re.sub(r"\b[Tt]he patient\b", "I", body)
        body = re.sub(r"\bI is\b", "I am", body)
        body = re.sub(r"\bI has\b", "I have", body)
        body = re.sub(r" (his|her) ", " my ", body)
        return body
    if "include or exclude" in text.lower():
        return "include" if draws[0] < 0.85 else "exclude"
    return lines[0] if lines else ""


_NUMBER: Final = re.compile(r"\d+(?:\.\d+)?")


def _semantic_verdict(text: str, lines: list[str], draws: list[float]) -> str | None:
    """The semantic verifier's verdict (module docstring), or None for another step."""
    if "retained or lost" not in text.lower():
        return None
    orig = next((i for i, line in enumerate(lines) if line.startswith("Original:")), None)
    rew = next((i for i, line in enumerate(lines) if line.startswith("Rewrite:")), None)
    if orig is None or rew is None:
        return None
    original = "\n".join(lines[orig : rew if rew > orig else len(lines)])[len("Original:") :]
    rewrite = "\n".join(lines[rew : orig if orig > rew else len(lines)])[len("Rewrite:") :]
    missing = set(_NUMBER.findall(original)) - set(_NUMBER.findall(rewrite))
    if not rewrite.strip() or missing or draws[0] < 0.1:
        return "lost"
    return "retained"


def respond(request: dict[str, Any], seed: str) -> dict[str, Any]:
    """A Messages-API-shaped reply to a step request; deterministic in (request, seed)."""
    from runner.simulated._green import step_answer  # the green-shielding steps (§4)
    from runner.simulated._pilot import step_answer as pilot_step  # the pilot's steps (§5)

    user = last_message_text(request)
    green = pilot_step(user, request, seed)
    if green is None:
        green = step_answer(user, request, seed)
    listed = _per_model(user, str(request.get("model", "")))
    text = (
        green
        if green is not None
        else listed
        if listed is not None
        else answer(user, _draws(request, seed))
    )
    canonical = canonical_json(request)
    return message_reply(request, seed, text, len(canonical) // 4, canonical=canonical)
