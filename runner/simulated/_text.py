"""The simulated model's text reader: answers a request without an image from its text alone.

:class:`SimulatedTextModel` answers the Messages API requests of ``docs/prompts.md`` §6 that
carry no image block: offline, deterministically, and never from an answer key (it imports no
item or truth module and opens no file; it only has the request). ``docs/simulated.md`` is the
user-facing description; this docstring is the reference.

**Reading the request** (:func:`read_prompt`). The system prompt (``system``, a string or text
blocks), every message (string content or text blocks, in order) and the *final user turn* (the
last ``user`` message) are read. Assistant messages before it are few-shot examples. In the
final user text:

* *Option lines* are lines ``A. text``, ``(B) text``, ``C) text`` or ``D: text`` (a capital
  letter at the start of a line). They form *groups*: a group starts at ``A`` and goes on while
  the next option line has the next letter. The last group of two or more options holds the
  test item's options (``multiple-choice``); earlier groups belong to inline examples.
* *Inline examples*: each earlier option group is an example's options. The lines after each
  group's last option (up to the next group; after the test group, to the end) begin with the
  same *trailing template lines* (the longest run that is equal, stripped, after every group);
  an example's answer is the paragraph of non-blank lines after them (inline examples are
  joined by blank lines). A line ``Answer: text`` (any case, something after the colon) before
  the test group that is in no such answer and is not also a line of the test item is an
  example's answer too (this is how yes/no/maybe and free-text examples are found). The
  *item part* is the text after the last example's answer.
* *Instructions* (sentences left out of question and context) start with ``answer``,
  ``respond`` or ``reply`` (any case), name all of yes, no and maybe, or ask for step-by-step
  reasoning (below).
* The *question* is the text after ``Question:`` on the last line so labelled, else the last
  sentence with ``?`` (before the options, for multiple choice), else the last sentence (before
  the options). Every other sentence of the item part (not an option or instruction line) is
  *context*. Sentences end at ``.``, ``!`` or ``?`` followed by white space, and at line
  ends. Leading labels ``Context:``, ``Passage:``, ``Abstract:``, ``Background:``,
  ``Text:`` are dropped.
* The kind: ``multiple-choice`` with an option group, else ``yes-no-maybe`` when the system
  prompt or final user text names yes, no and maybe (whole words, any case), else
  ``free-text``.
* *Chain of thought* is asked for when the system prompt or the final user text says ``step by
  step``, ``explain your reasoning``, ``show your reasoning`` or ``think it through`` / ``think
  through`` (any case).

*Words* are the lower-cased runs of letters and digits, ``n't`` read as ``not``, a final ``s``
dropped from words of four or more letters not ending in ``ss``; *content words* are the words
of two or more characters (or digits) not in :data:`STOP_WORDS`.

**The reader** (no randomness; :meth:`SimulatedTextModel.reader_answer`):

1. *Arithmetic*: when the question holds integers joined by ``+``, ``-``, ``*``, ``plus``,
   ``minus`` or ``times`` (the first such expression; ``*`` before ``+`` and ``-``), its value
   is computed; for multiple choice the option whose text (stripped, a final ``.`` and commas
   removed) is that number is chosen; a free-text answer is the number.
2. *Knowledge* (multiple choice, version 3): the *relevant* background statements
   (:data:`runner.simulated._knowledge.KNOWLEDGE`) are those sharing the most content words, at
   least two, with the question and context. The model *knows* a statement when the first 8
   hex digits of SHA-256(``"prompt-sim-text|knows|{model id}|{statement}"``) over
   ``0xFFFFFFFF`` are below its *coverage* ``knowledge_low + (knowledge_high - knowledge_low)
   * v``, ``v`` from SHA-256(``"prompt-sim-text|knowledge|{model id}"``) likewise. When it
   knows at least one relevant statement, each option scores its distinct content words that
   are not in the question or context but are in a known relevant statement; a single highest
   positive score is the answer, read *from knowledge*. Otherwise (no relevant statement, none
   known, a tie) the overlap rule below decides.
3. *Multiple choice* otherwise: each option scores the number of its distinct content words
   that occur among the content words of the question and context; the highest wins, ties
   broken by the smallest SHA-256 of ``"{item part}|{label}"`` (so an unknown item's choice
   moves with the option order).
4. *Yes/no/maybe*: the *coverage* is the share of the question's content words found in the
   context. Below ``coverage_threshold`` (default 0.5): ``maybe``. Otherwise ``no`` when a
   negation word (:data:`NEGATIONS`) stands within ``negation_window`` (3) words of a covered
   word in the same context sentence, else ``yes``. With no context or no content word in the
   question there is nothing to read: the label is chosen by SHA-256 of the item part.
5. *Free text*: the longest context sentence sharing a content word with the question, else a
   content word of the question chosen by SHA-256 of the question (any word if it has no
   content word).

**Behaviour** (:class:`TextParams`). The model *slips* (answers another option or label, chosen
by a draw, or another context sentence or question word for free text) with probability
``sigmoid(base(model) - weight_system*[system prompt] - weight_shot*examples -
weight_cot*[chain of thought] - weight_known*[from knowledge] + weight_temperature*T)``, where
``[from knowledge]`` is 1 when the reader answered from a known statement, ``examples``
counts the prior assistant turns plus the inline example answers, ``T`` is the effective
temperature below and
``base(model) = base_center + base_spread * (2u - 1)`` with ``u`` the first 8 hex digits of
SHA-256(``"prompt-sim-text|base|{model id}"``) over ``0xFFFFFFFF`` (so every model id has its
own, fixed ability). With probability ``unparseable`` the reply names no label or two (free
text: an empty reply).

**Sampling parameters.** ``temperature`` (default 1, as the API's), ``top_p`` and ``top_k``
give the *effective temperature* ``T = temperature * top_p`` (``top_p`` default 1), or 0 when
``top_k`` is 1. At ``T = 0`` every draw comes from SHA-256 of the canonical request alone, so
replicates (which differ only in the per-trial seed) give the same text; at ``T > 0`` the draws
come from SHA-256 of the per-trial seed and the canonical request (replicates differ) and the
slip log-odds grow by ``weight_temperature * T``. ``stop_sequences`` cut the reply before the
first occurrence of any of them (``stop_reason`` ``"stop_sequence"``), and a reply longer than
``4 * max_tokens`` characters is cut there (``"max_tokens"``). Values of the wrong type are
ignored. The same request and seed always give the same response, byte for byte.

**The reply's form.** With chain of thought, or when the examples' answers have more than one
line, two short sentences of reasoning (no option letter, no yes/no/maybe word, so the parsers'
first-token mode reads the answer line), then on its own line the answer in the examples' form
(below) when that is more than the bare label, else ``Answer: X``. Otherwise the form of the
last example's answer (its last line) is copied with its label replaced: ``Answer: B`` gives
``Answer: C``, ``(B)`` gives ``(C)``, ``B. text`` gives ``C. <option C's text>``, ``Yes`` gives
``No``. Without examples the reply is the bare letter, word or text. An unparseable reply is
``Answer: X or Y`` (half of them: the parsers' ``exactly-one`` mode finds two labels,
``first-token`` reads ``X``, the model's choice) or a sentence naming no label.

**Position** (multiple choice). *Capture*: with probability ``c = sigmoid(prior_base +
prior_shot * examples + prior_cot * [chain of thought])`` the reply is the first option label
whatever the reader read (a draw of its own, the fifth of the request's generator); else the
reader's answer, or a slip. A slip is not uniform over the other options: option ``L``
(other than the reader's answer ``R``) is drawn with weight ``exp(s)`` when ``L`` is the first
label of the item's options and 1 otherwise, ``s = weight_position + weight_position_shot *
examples``. So the model over-predicts position A, more so with few-shot examples, and since
the reader follows content while slips follow position, reordering the options (a variant,
``docs/variants.md``) changes its letter more often than its content. The model's *letter
distribution* (:meth:`SimulatedTextModel.letter_distribution`) is ``c * [L first] + (1 - c) *
q(L)`` with ``q(R) = 1 - p`` and ``q(L) = p * w(L) / sum of w`` for the others, ``p`` the slip
probability (``c = p = 0`` without noise: then ``P(R) = 1`` is written as log-probability 0
and the others as ``-1000``).

**Log-probabilities.** A request that asks for them (``logprobs`` and ``top_logprobs``, a
model with ``logprobs = N``, ``docs/prompts.md`` §5) is answered in the chat-completions form
(``openai-chat``) with ``choices[0].logprobs.content``: one position, whose ``token`` is the
reply's first whitespace-separated word (``""`` for an empty reply) and whose ``top_logprobs``
are the option letters with their natural-log probabilities from the letter distribution,
highest first (ties by label), at most ``top_logprobs`` of them; its ``logprob`` is the
letter's when the token is a letter, else the highest letter's. Yes/no/maybe and free-text
requests get the reply's first word with log-probability 0 and no alternatives.

A request with an image block, or whose text asks for the tumbling-E JSON, is answered by the
vision model of :mod:`runner.simulated`, exactly as before.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np

from ledger import canonical_json
from runner.simulated._knowledge import KNOWLEDGE

__all__ = [
    "KINDS",
    "NEGATIONS",
    "STOP_WORDS",
    "TEXT_PARAMS_VERSION",
    "SimulatedTextModel",
    "TextParams",
    "TextPrompt",
    "content_words",
    "evaluate_arithmetic",
    "has_image",
    "knowledge_coverage",
    "knows",
    "model_base",
    "read_prompt",
    "words",
]

TEXT_PARAMS_VERSION: Final = "prompt-sim-text-3"
"""Version of the text reader and its default :class:`TextParams`; cite it in reports."""

KINDS: Final = ("multiple-choice", "yes-no-maybe", "free-text")
"""What the text reader answers (:attr:`TextPrompt.kind`)."""

STOP_WORDS: Final = frozenset(
    (
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "answer",
        "answers",
        "option",
        "options",
        "choice",
        "choices",
        "letter",
        "correct",
        "best",
        "right",
        "final",
        "question",
        "context",
        "passage",
        "abstract",
        "background",
        "text",
        "following",
        "given",
        "select",
        "choose",
        "pick",
        "respond",
        "reply",
        "true",
        "false",
        "statement",
        "statements",
        "yes",
        "no",
        "maybe",
        "not",
        "without",
        "never",
        "neither",
        "nor",
        "none",
        "cannot",
    )
)
"""Words that carry no content for the overlap reader (compared after the plural cut of
:func:`words`); the yes/no/maybe and negation words are among them, so the reasoning sentences,
which quote content words, never name a yes/no/maybe label."""

NEGATIONS: Final = frozenset({"no", "not", "without", "never", "neither", "nor", "none", "cannot"})
"""Negation words of the yes/no/maybe rule (``n't`` is read as ``not``)."""

_LABELS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_YNM: Final = ("yes", "no", "maybe")
_OPTION_LINE: Final = re.compile(r"[ \t]*(?:\(([A-Z])\)|([A-Z])[.):])[ \t]+(\S(?:.*\S)?)")
_ANSWER_LINE: Final = re.compile(r"^[ \t]*answer[ \t]*:[ \t]*\S", re.I)
_YNM_WORDS: Final = tuple(re.compile(rf"(?<![A-Za-z]){w}(?![A-Za-z])", re.I) for w in _YNM)
_COT: Final = re.compile(
    r"step[\s-]+by[\s-]+step|explain your reasoning|show your reasoning|think(?: it)? through",
    re.I,
)
_INSTRUCTION: Final = re.compile(r"^[ \t]*(?:answer|respond|reply)\b", re.I)
_QUESTION_LABEL: Final = re.compile(r"^[ \t]*question[ \t]*:[ \t]*", re.I)
_CONTEXT_LABEL: Final = re.compile(
    r"^[ \t]*(?:context|passage|abstract|background|text)[ \t]*:[ \t]*", re.I
)
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+")
_WORD: Final = re.compile(r"[^\W_]+")
_ARITHMETIC: Final = re.compile(
    r"(?<!\w)(?<!\d\.)\d{1,18}"
    r"(?:\s*(?:[-+*]|\bplus\b|\bminus\b|\btimes\b)\s*\d{1,18}(?!\w|\.\d)){1,9}",
    re.I,
)
_ARITHMETIC_PART: Final = re.compile(r"\d+|[-+*]|plus|minus|times", re.I)
_MC_LABEL: Final = re.compile(r"[(\[]([A-Za-z])[)\]]|(?<![\w'-])([A-Z])(?![\w'-])")
_YNM_LABEL: Final = re.compile(r"(?<![\w'-])(yes|no|maybe)(?![\w'-])", re.I)
_ANSWER_PREFIX: Final = re.compile(r"^[ \t]*answer[ \t]*[:=][ \t]*", re.I)
_LABEL_THEN_TEXT: Final = re.compile(r"([)\]]?[.):]?)[ \t]+\S")
_PUNCTUATION_ONLY: Final = re.compile(r"[\s.!:)\]]*")
_CLOSING: Final = re.compile(r"[)\]]?[.:]?")
_NO_LABEL: Final = {
    "multiple-choice": "The options do not settle it from the text given.",
    "yes-no-maybe": "The text given does not settle it.",
}
_NOTHING_ASKED: Final = "There is nothing to answer in the text given."


@dataclass(frozen=True)
class TextParams:
    """Parameters of the text reader (defaults: :data:`TEXT_PARAMS_VERSION`).

    * ``noise = True``: ``False`` turns off slips, unparseable replies and the temperature
      term: the reply is the reader's answer in the prompt's form.
    * ``base_center = -0.5``, ``base_spread = 1.0``: a model's base log-odds of a slip is
      ``base_center + base_spread * (2u - 1)``, ``u`` in [0, 1] from SHA-256 of its id, so
      between -1.5 (slip 18 %) and 0.5 (62 %).
    * ``weight_system = 0.5``: log-odds removed when the request has a system prompt.
    * ``weight_shot = 0.4``: log-odds removed per few-shot example.
    * ``weight_cot = 1.0``: log-odds removed when the prompt asks for step-by-step reasoning.
    * ``weight_temperature = 0.5``: log-odds added per unit of effective temperature.
    * ``unparseable = 0.03``: probability that a reply names no label or two.
    * ``coverage_threshold = 0.5``: yes/no/maybe: least share of the question's content words
      the context must hold for ``yes`` or ``no`` (else ``maybe``).
    * ``negation_window = 3``: yes/no/maybe: how many words from a covered word a negation
      may stand to make the answer ``no``.
    * ``weight_position = 0.5``, ``weight_position_shot = 1.0``: multiple choice: a slip goes
      to another option with weight ``exp(s)`` for the first option label (``A``) and 1 for
      the others, ``s = weight_position + weight_position_shot * examples``: a prior towards
      the first position that few-shot examples strengthen (module docstring, *Position*).
    * ``knowledge_low = 0.5``, ``knowledge_high = 0.9``: the share of the background statements
      (:data:`runner.simulated._knowledge.KNOWLEDGE`) a model id knows is ``knowledge_low +
      (knowledge_high - knowledge_low) * v``, ``v`` in [0, 1] from SHA-256 of its id
      (module docstring, *Knowledge*).
    * ``weight_known = 1.5``: log-odds of a slip removed when the reader answers from a known
      statement (the model is surer of what it knows).
    * ``prior_base = -3.0``, ``prior_shot = 0.8``, ``prior_cot = 0.5``: multiple choice: the
      log-odds of *position capture* (the reply is the first option, whatever the reader
      read) is ``prior_base + prior_shot * examples + prior_cot * [chain of thought]``: about
      5 % for a bare prompt, 35 % with three examples (module docstring, *Position*).
    """

    noise: bool = True
    base_center: float = -0.5
    base_spread: float = 1.0
    weight_system: float = 0.5
    weight_shot: float = 0.4
    weight_cot: float = 1.0
    weight_temperature: float = 0.5
    unparseable: float = 0.03
    coverage_threshold: float = 0.5
    negation_window: int = 3
    weight_position: float = 0.5
    weight_position_shot: float = 1.0
    knowledge_low: float = 0.5
    knowledge_high: float = 0.9
    weight_known: float = 1.5
    prior_base: float = -3.0
    prior_shot: float = 0.8
    prior_cot: float = 0.5

    def as_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (with ``"version": TEXT_PARAMS_VERSION``)."""
        return {"version": TEXT_PARAMS_VERSION, **asdict(self)}


@dataclass(frozen=True)
class TextPrompt:
    """What the reader sees in a request without an image (module docstring, *Reading*).

    ``examples`` holds the answer text of every few-shot example: the prior assistant turns in
    order, then the inline example answer lines in order. ``context`` holds the context
    sentences; ``options`` the ``(label, text)`` of the test item's options (multiple choice).
    """

    model: str
    system: str
    final: str
    item: str
    question: str
    context: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    kind: str
    examples: tuple[str, ...]
    cot: bool
    prompt_chars: int

    @property
    def has_system(self) -> bool:
        """True when the request has a non-blank system prompt."""
        return bool(self.system.strip())

    @property
    def shots(self) -> int:
        """The number of few-shot examples (prior assistant turns and inline answers)."""
        return len(self.examples)


# --------------------------------------------------------------------------- words


def _stem(word: str) -> str:
    return word[:-1] if len(word) >= 4 and word.endswith("s") and not word.endswith("ss") else word


def words(text: str) -> list[str]:
    """The words of ``text`` (module docstring): lower case, ``n't`` as ``not``, plurals cut."""
    lowered = text.lower().replace("n't", " not").replace("n\u2019t", " not")
    return [_stem(word) for word in _WORD.findall(lowered)]


_STOP: Final = frozenset(_stem(word) for word in STOP_WORDS)


def content_words(text: str) -> list[str]:
    """The content words of ``text`` in order (repeats kept): not stop words, 2+ characters."""
    return [w for w in words(text) if w not in _STOP and (len(w) >= 2 or w.isdigit())]


def evaluate_arithmetic(text: str) -> int | None:
    """The value of the first simple arithmetic expression in ``text``, or None.

    Integers joined by ``+``, ``-``, ``*``, ``plus``, ``minus`` or ``times`` (at most ten
    integers of at most 18 digits); ``*`` and ``times`` bind before ``+`` and ``-``.
    """
    found = _ARITHMETIC.search(text)
    if found is None:
        return None
    parts = [p.lower() for p in _ARITHMETIC_PART.findall(found.group(0))]
    terms: list[int] = [int(parts[0])]
    signs: list[int] = [1]
    for op, number in zip(parts[1::2], parts[2::2], strict=True):
        value = int(number)
        if op in ("*", "times"):
            terms[-1] *= value
        else:
            terms.append(value)
            signs.append(1 if op in ("+", "plus") else -1)
    return sum(s * t for s, t in zip(signs, terms, strict=True))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def model_base(model_id: str, params: TextParams | None = None) -> float:
    """The base slip log-odds of a model id (module docstring): fixed per id, in a band."""
    p = params if params is not None else TextParams()
    digest = hashlib.sha256(f"prompt-sim-text|base|{model_id}".encode()).hexdigest()
    u = int(digest[:8], 16) / 0xFFFFFFFF
    return p.base_center + p.base_spread * (2.0 * u - 1.0)


def knowledge_coverage(model_id: str, params: TextParams | None = None) -> float:
    """The share of the background statements a model id knows (module docstring)."""
    p = params if params is not None else TextParams()
    digest = hashlib.sha256(f"prompt-sim-text|knowledge|{model_id}".encode()).hexdigest()
    v = int(digest[:8], 16) / 0xFFFFFFFF
    return p.knowledge_low + (p.knowledge_high - p.knowledge_low) * v


def knows(model_id: str, statement: str, params: TextParams | None = None) -> bool:
    """True when the model id knows the statement: its hash share is below the coverage."""
    digest = hashlib.sha256(f"prompt-sim-text|knows|{model_id}|{statement}".encode()).hexdigest()
    return int(digest[:8], 16) / 0xFFFFFFFF < knowledge_coverage(model_id, params)


_KNOWLEDGE_WORDS: Final = tuple(frozenset(content_words(s)) for s in KNOWLEDGE)


# --------------------------------------------------------------------------- reading


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text blocks joined by ``\\n``."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                parts.append(text if isinstance(text, str) else "")
    return "\n".join(parts)


def last_message_text(request: dict[str, Any]) -> str:
    """The text of a request's last message: its string, or its text blocks joined in order.

    What the template simulations (``simulated_steps``, ``simulated_green``,
    ``simulated_pilot``) read a step call or a target trial from.
    """
    messages = request.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def has_image(request: dict[str, Any]) -> bool:
    """True when any message of the request has an image block."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "image" for b in content
        ):
            return True
    return False


def _option_groups(lines: list[str]) -> list[list[tuple[int, str, str]]]:
    """Option lines grouped A, B, C, ... (each a line index, label and text)."""
    groups: list[list[tuple[int, str, str]]] = []
    for index, line in enumerate(lines):
        match = _OPTION_LINE.match(line)
        if match is None:
            continue
        label = match.group(1) or match.group(2)
        entry = (index, label, match.group(3))
        if label == "A":
            groups.append([entry])
        elif groups and _LABELS.index(label) == _LABELS.index(groups[-1][-1][1]) + 1:
            groups[-1].append(entry)
    return groups


def _inline_answers(lines: list[str], groups: list[list[tuple[int, str, str]]]) -> list[range]:
    """The line ranges of the inline examples' answers, from the option groups' layout.

    The lines after each group's last option up to the next group (after the test group: to
    the end) start with the same *trailing template lines* (the longest common run, compared
    stripped); an earlier group's answer is the paragraph of non-blank lines after them.
    """
    if len(groups) < 2:
        return []
    segments: list[tuple[int, int]] = []
    for i, group in enumerate(groups):
        stop = groups[i + 1][0][0] if i + 1 < len(groups) else len(lines)
        segments.append((group[-1][0] + 1, stop))
    shared = min(stop - begin for begin, stop in segments)
    for offset in range(shared):
        if len({lines[begin + offset].strip() for begin, _ in segments}) > 1:
            shared = offset
            break
    found: list[range] = []
    for begin, stop in segments[:-1]:
        first = begin + shared
        while first < stop and not lines[first].strip():
            first += 1
        last = first
        while last < stop and lines[last].strip():
            last += 1
        if last > first:
            found.append(range(first, last))
    return found


def _is_instruction(sentence: str) -> bool:
    return bool(
        _INSTRUCTION.match(sentence)
        or _COT.search(sentence)
        or all(p.search(sentence) for p in _YNM_WORDS)
    )


def _sentences_of(line: str) -> list[str]:
    """The sentences of one line, its leading label dropped, instructions left out."""
    return [s for s in _sentences(_CONTEXT_LABEL.sub("", line)) if not _is_instruction(s)]


def read_prompt(request: dict[str, Any]) -> TextPrompt:
    """Read a Messages request the way the text reader does (module docstring, *Reading*)."""
    system_value = request.get("system")
    system = _text_of(system_value) if system_value is not None else ""
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    texts = [_text_of(m.get("content")) for m in messages]
    final_index = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    final = texts[final_index] if final_index >= 0 else ""
    examples = [
        texts[i]
        for i, m in enumerate(messages[: max(final_index, 0)])
        if m.get("role") == "assistant"
    ]
    lines = final.split("\n")
    groups = [g for g in _option_groups(lines) if len(g) >= 2]
    test_group = groups[-1] if groups else []
    first_option = test_group[0][0] if test_group else len(lines)
    blocks = _inline_answers(lines, groups)
    inside = {i for block in blocks for i in block}
    template = {line.strip() for line in lines[first_option:]}
    blocks.extend(
        range(i, i + 1)
        for i, line in enumerate(lines[:first_option])
        if _ANSWER_LINE.match(line) and i not in inside and line.strip() not in template
    )
    blocks.sort(key=lambda block: block.start)
    examples.extend("\n".join(lines[i].strip() for i in block) for block in blocks)
    start = blocks[-1].stop if blocks else 0
    option_rows = {index for index, _, _ in test_group}
    before: list[str] = []  # sentences before the test item's options
    after: list[str] = []
    labelled: str | None = None
    for index in range(start, len(lines)):
        line = lines[index]
        if index in option_rows:
            continue
        if _QUESTION_LABEL.match(line) and index < first_option:
            labelled = " ".join(_sentences_of(_QUESTION_LABEL.sub("", line)))
            continue
        (before if index < first_option else after).extend(_sentences_of(line))
    question = ""
    if labelled is not None:
        question = labelled
    else:
        pool = before if before else after
        asked = [i for i, sentence in enumerate(pool) if "?" in sentence]
        if pool:
            question = pool.pop(asked[-1] if asked else len(pool) - 1)
    context = before + after
    options = tuple((label, text) for _, label, text in test_group)
    scope = system + "\n" + final
    if options:
        kind = "multiple-choice"
    elif all(p.search(scope) for p in _YNM_WORDS):
        kind = "yes-no-maybe"
    else:
        kind = "free-text"
    item = "\n".join(lines[start:])
    return TextPrompt(
        model=str(request.get("model", "")),
        system=system,
        final=final,
        item=item,
        question=question,
        context=tuple(context),
        options=options,
        kind=kind,
        examples=tuple(examples),
        cot=bool(_COT.search(scope)),
        prompt_chars=len(system) + len("\n".join(texts)),
    )


# --------------------------------------------------------------------------- the model


def _number_text(text: str) -> str:
    return text.strip().rstrip(".").replace(",", "").strip()


def _join_words(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _distinct(items: list[str], limit: int) -> list[str]:
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
        if len(out) == limit:
            break
    return out


@dataclass(frozen=True)
class _Reading:
    """The reader's answer (a label or a text) and the sentences that explain it."""

    answer: str
    reasons: tuple[str, str]
    known: bool = False


def message_reply(
    request: dict[str, Any],
    seed: str,
    text: str,
    input_tokens: int,
    *,
    canonical: bytes | None = None,
    stop_reason: str = "end_turn",
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    """A Messages-API reply of every simulated model: ``text``, its id from (seed, request).

    ``canonical`` is the request's canonical JSON when the caller has it already.
    """
    body = canonical if canonical is not None else canonical_json(request)
    request_id = hashlib.sha256(seed.encode("utf-8") + body).hexdigest()
    return {
        "id": f"msg_sim_{request_id[:24]}",
        "type": "message",
        "role": "assistant",
        "model": f"simulated/{request.get('model', '')}",
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": input_tokens, "output_tokens": max(1, len(text) // 4)},
    }


class SimulatedTextModel:
    """A deterministic stand-in for a language model on text prompts (see the module doc).

    Construct with :class:`TextParams` (defaults when omitted) and call :meth:`respond` per
    trial with the request and the per-trial seed.
    """

    def __init__(self, params: TextParams | None = None) -> None:
        """Keep the parameters (defaults when ``params`` is None)."""
        self.params = params if params is not None else TextParams()

    # ----------------------------------------------------------------- reading

    def reader_answer(self, request: dict[str, Any]) -> str:
        """The reader's answer to a request (no slip, no randomness): a label or a text."""
        return self._read(read_prompt(request)).answer

    def _read(self, prompt: TextPrompt) -> _Reading:
        if prompt.kind == "multiple-choice":
            return self._read_choice(prompt)
        if prompt.kind == "yes-no-maybe":
            return self._read_yes_no(prompt)
        return self._read_free(prompt)

    def _read_choice(self, prompt: TextPrompt) -> _Reading:
        value = evaluate_arithmetic(prompt.question)
        if value is not None:
            for label, text in prompt.options:
                if _number_text(text) == str(value):
                    expression = _ARITHMETIC.search(prompt.question)
                    shown = " ".join(
                        {"+": "plus", "-": "minus", "*": "times"}.get(p, p.lower())
                        for p in _ARITHMETIC_PART.findall(expression.group(0) if expression else "")
                    )
                    return _Reading(
                        label, (f"{shown} makes {value}.", "One option states that number.")
                    )
        recalled = self._recall(prompt)
        if recalled is not None:
            return recalled
        seen = set(content_words(prompt.question + "\n" + "\n".join(prompt.context)))
        scores = {label: len(set(content_words(text)) & seen) for label, text in prompt.options}
        best = max(scores.values())
        tied = [label for label, score in scores.items() if score == best]
        label = min(tied, key=lambda lab: _digest(f"{prompt.item}|{lab}"))
        topic = _distinct(content_words(prompt.question), 3)
        first = (
            f"The question is about {_join_words(topic)}."
            if topic
            else "The question gives little to go on."
        )
        return _Reading(label, (first, "One option shares the most words with it."))

    def _recall(self, prompt: TextPrompt) -> _Reading | None:
        """The option the model's background knowledge points to (module docstring), or None.

        The *relevant* statements share the most content words (at least two) with the
        question and context; when the model knows at least one of them, each option scores
        its content words (not in the question or context) found in the known relevant
        statements, and a single highest positive score is the answer.
        """
        asked = set(content_words(prompt.question + "\n" + "\n".join(prompt.context)))
        overlaps = [len(asked & statement) for statement in _KNOWLEDGE_WORDS]
        top = max(overlaps, default=0)
        if top < 2:
            return None
        known: set[str] = set()
        for text, statement, overlap in zip(KNOWLEDGE, _KNOWLEDGE_WORDS, overlaps, strict=True):
            if overlap == top and knows(prompt.model, text, self.params):
                known |= statement
        if not known:
            return None
        scores = {
            label: len((set(content_words(text)) - asked) & known) for label, text in prompt.options
        }
        best = max(scores.values())
        tied = [label for label, score in scores.items() if score == best]
        if best <= 0 or len(tied) != 1:
            return None
        topic = _distinct(content_words(prompt.question), 3)
        first = (
            f"The question is about {_join_words(topic)}."
            if topic
            else "The question gives little to go on."
        )
        return _Reading(tied[0], (first, "What is known of it points to one option."), True)

    def _read_yes_no(self, prompt: TextPrompt) -> _Reading:
        asked = set(content_words(prompt.question))
        sentences = [words(s) for s in prompt.context]
        if not asked or not sentences:
            label = _YNM[_digest(prompt.item)[0] % 3]
            return _Reading(label, ("The text gives little to go on.", "So this is a guess."))
        covered = {w for s in sentences for w in s if w in asked}
        coverage = len(covered) / len(asked)
        first = f"The context holds {len(covered)} of the {len(asked)} key terms of the question."
        if coverage < self.params.coverage_threshold:
            return _Reading("maybe", (first, "That is too little to decide."))
        if _negated(sentences, covered, self.params.negation_window):
            return _Reading("no", (first, "The context negates them."))
        return _Reading("yes", (first, "Nothing in the context negates them."))

    def _free_candidates(self, prompt: TextPrompt) -> list[str]:
        value = evaluate_arithmetic(prompt.question)
        if value is not None:
            return [str(value)]
        asked = set(content_words(prompt.question))
        overlapping = [s for s in prompt.context if asked & set(content_words(s))]
        if overlapping:
            return [max(overlapping, key=len)]
        pool = content_words(prompt.question) or words(prompt.question)
        if not pool:
            return []
        return [pool[_digest(prompt.question)[0] % len(pool)]]

    def _read_free(self, prompt: TextPrompt) -> _Reading:
        found = self._free_candidates(prompt)
        answer = found[0] if found else _NOTHING_ASKED
        topic = _distinct(content_words(prompt.question), 3)
        first = (
            f"The question is about {_join_words(topic)}."
            if topic
            else "The question gives little to go on."
        )
        return _Reading(answer, (first, "The text given settles it."))

    # ----------------------------------------------------------------- behaviour

    def effective_temperature(self, request: dict[str, Any]) -> float:
        """``temperature * top_p``, or 0 when ``top_k`` is 1 (module docstring)."""
        temperature = _number(request.get("temperature"), 1.0)
        top_p = _number(request.get("top_p"), 1.0)
        top_k = request.get("top_k")
        if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k == 1:
            return 0.0
        return max(0.0, temperature) * min(1.0, max(0.0, top_p))

    def slip_probability(self, request: dict[str, Any]) -> float:
        """The probability that the model answers other than its reader (0 without noise).

        Position capture (:meth:`capture_probability`) comes on top of it.
        """
        if not self.params.noise:
            return 0.0
        prompt = read_prompt(request)
        known = self._read(prompt).known
        return self._slip(prompt, self.effective_temperature(request), known)

    def capture_probability(self, request: dict[str, Any]) -> float:
        """Multiple choice: the probability that the reply is the first option (0 otherwise)."""
        if not self.params.noise:
            return 0.0
        return self._capture(read_prompt(request))

    def _slip(self, prompt: TextPrompt, temperature: float, known: bool = False) -> float:
        p = self.params
        logit = model_base(prompt.model, p)
        logit -= p.weight_system * prompt.has_system
        logit -= p.weight_shot * prompt.shots
        logit -= p.weight_cot * prompt.cot
        logit -= p.weight_known * known
        logit += p.weight_temperature * temperature
        return _sigmoid(logit)

    def _capture(self, prompt: TextPrompt) -> float:
        if prompt.kind != "multiple-choice" or not prompt.options:
            return 0.0
        p = self.params
        return _sigmoid(p.prior_base + p.prior_shot * prompt.shots + p.prior_cot * prompt.cot)

    def respond(self, request: dict[str, Any], seed: str) -> dict[str, Any]:
        """A Messages-API-shaped response object for one request; deterministic in (request, seed).

        ``request`` is the request object of ``docs/prompts.md`` §6 without an image block;
        ``seed`` is the per-trial string (used only at a temperature above 0).
        """
        prompt = read_prompt(request)
        temperature = self.effective_temperature(request)
        canonical = canonical_json(request)
        material = b"prompt-sim-text|" + (seed.encode("utf-8") if temperature > 0 else b"")
        value = int.from_bytes(hashlib.sha256(material + b"|" + canonical).digest(), "big")
        draw_slip, draw_other, draw_fail, draw_kind, draw_capture = np.random.Generator(
            np.random.PCG64(value)
        ).random(5)
        reading = self._read(prompt)
        answer = reading.answer
        p = self.params
        if p.noise and draw_capture < self._capture(prompt):
            answer = prompt.options[0][0]
        elif p.noise and draw_slip < self._slip(prompt, temperature, reading.known):
            others = self._others(prompt, answer)
            if others:
                answer = self._slip_to(prompt, others, float(draw_other))
        if p.noise and draw_fail < p.unparseable:
            text = self._unparseable(prompt, answer, draw_kind)
        else:
            text = self._write(prompt, answer, reading.reasons)
        text, stop_reason, stop_sequence = _cut(text, request)
        return message_reply(
            request,
            seed,
            text,
            prompt.prompt_chars // 4,
            canonical=canonical,
            stop_reason=stop_reason,
            stop_sequence=stop_sequence,
        )

    def _weights(self, prompt: TextPrompt, others: list[str]) -> list[float]:
        """Module docstring, *Position*: each other option's slip weight."""
        if prompt.kind != "multiple-choice" or not prompt.options:
            return [1.0] * len(others)
        first = prompt.options[0][0]
        s = self.params.weight_position + self.params.weight_position_shot * prompt.shots
        return [math.exp(s) if label == first else 1.0 for label in others]

    def _slip_to(self, prompt: TextPrompt, others: list[str], draw: float) -> str:
        weights = self._weights(prompt, others)
        total = sum(weights)
        running = 0.0
        for label, weight in zip(others, weights, strict=True):
            running += weight
            if draw * total < running:
                return label
        return others[-1]

    def letter_distribution(self, request: dict[str, Any]) -> list[tuple[str, float]]:
        """``(label, probability)`` of each option of a multiple-choice request, in label order.

        Module docstring, *Position*: the reader's answer keeps ``1 - p``, the slip mass is
        spread by the position weights. Empty for a request that is not multiple choice.
        """
        prompt = read_prompt(request)
        if prompt.kind != "multiple-choice":
            return []
        reading = self._read(prompt)
        answer = reading.answer
        temperature = self.effective_temperature(request)
        noise = self.params.noise
        slip = self._slip(prompt, temperature, reading.known) if noise else 0.0
        capture = self._capture(prompt) if noise else 0.0
        first = prompt.options[0][0]
        others = self._others(prompt, answer)
        weights = dict(zip(others, self._weights(prompt, others), strict=True))
        total = sum(weights.values()) or 1.0
        return [
            (
                label,
                capture * (label == first)
                + (1.0 - capture)
                * (1.0 - slip if label == answer else slip * weights.get(label, 0.0) / total),
            )
            for label, _ in prompt.options
        ]

    def respond_openai(self, request: dict[str, Any], seed: str) -> dict[str, Any]:
        """The chat-completions form of :meth:`respond`, with log-probabilities (docstring).

        For a request that asks for them (``logprobs``, ``top_logprobs``): the first position's
        ``top_logprobs`` are the option letters of :meth:`letter_distribution`.
        """
        message = self.respond(request, seed)
        text = "".join(b["text"] for b in message["content"])
        token = text.split()[0] if text.split() else ""
        letters = sorted(
            (
                (label, math.log(p) if p > 0 else -1000.0)
                for label, p in self.letter_distribution(request)
            ),
            key=lambda pair: (-pair[1], pair[0]),
        )
        top = request.get("top_logprobs")
        count = top if isinstance(top, int) and not isinstance(top, bool) else 0
        found = dict(letters)
        bare = token.strip(".:)(")
        own = found.get(bare, letters[0][1] if letters else 0.0)
        position = {
            "token": token,
            "logprob": own,
            "bytes": list(token.encode("utf-8")),
            "top_logprobs": [
                {"token": label, "logprob": lp, "bytes": list(label.encode("utf-8"))}
                for label, lp in letters[:count]
            ],
        }
        usage = message["usage"]
        return {
            "id": "chatcmpl-" + message["id"][len("msg_sim_") :],
            "object": "chat.completion",
            "model": message["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": {"content": [position]},
                    "finish_reason": "stop" if message["stop_reason"] != "max_tokens" else "length",
                }
            ],
            "usage": {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            },
        }

    def _others(self, prompt: TextPrompt, answer: str) -> list[str]:
        if prompt.kind == "multiple-choice":
            return [label for label, _ in prompt.options if label != answer]
        if prompt.kind == "yes-no-maybe":
            return [label for label in _YNM if label != answer]
        pool = list(prompt.context) + _distinct(content_words(prompt.question), 50)
        return [c for c in _distinct(pool, len(pool)) if c != answer]

    def _unparseable(self, prompt: TextPrompt, answer: str, draw: float) -> str:
        if prompt.kind == "free-text":
            return ""
        others = self._others(prompt, answer)
        if draw < 0.5 and others:
            return f"Answer: {answer} or {others[int(draw * 2 * len(others))]}"
        return _NO_LABEL[prompt.kind]

    def _write(self, prompt: TextPrompt, answer: str, reasons: tuple[str, str]) -> str:
        """The reply in the prompt's form (module docstring, *The reply's form*)."""
        example = prompt.examples[-1].strip() if prompt.examples else ""
        example_lines = [line for line in example.split("\n") if line.strip()]
        last = example_lines[-1].strip() if example_lines else ""
        line = self._mimic(prompt, answer, last) if last else None
        reasoned = prompt.cot or len(example_lines) > 1
        if not reasoned:
            return line if line is not None else answer
        if line is None or line == answer:
            line = f"Answer: {answer}"
        return f"{reasons[0]} {reasons[1]}\n{line}"

    def _mimic(self, prompt: TextPrompt, answer: str, last: str) -> str | None:
        """``last`` (an example's answer line) with its label replaced by ``answer``."""
        if prompt.kind == "free-text":
            prefix = _ANSWER_PREFIX.match(last)
            return prefix.group(0) + answer if prefix else answer
        if prompt.kind == "multiple-choice":
            labels = {label for label, _ in prompt.options}
            matches = _MC_LABEL.finditer(last)
            found = next((m for m in matches if (m[1] or m[2]).upper() in labels), None)
            group = 1 if found is not None and found.group(1) else 2
        else:
            found = _YNM_LABEL.search(last)
            group = 1
        if found is None:
            return None
        start, end = found.span(group)
        said = last[start:end]
        if prompt.kind == "yes-no-maybe":
            if len(said) > 1 and said.isupper():
                label = answer.upper()
            else:
                label = answer.capitalize() if said[:1].isupper() else answer
        else:
            label = answer.lower() if said.islower() else answer
        suffix = last[end:]
        with_text = _LABEL_THEN_TEXT.match(suffix)
        texts = dict(prompt.options)
        if with_text is not None and prompt.kind == "multiple-choice" and answer in texts:
            suffix = f"{with_text.group(1)} {texts[answer]}"
        elif not _PUNCTUATION_ONLY.fullmatch(suffix):
            closing = _CLOSING.match(suffix)
            suffix = closing.group(0) if closing is not None else ""
        return last[:start] + label + suffix


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    number = float(value)
    return number if math.isfinite(number) else default


def _cut(text: str, request: dict[str, Any]) -> tuple[str, str, str | None]:
    """Apply ``stop_sequences`` and ``max_tokens``: the text, stop reason and stop sequence."""
    stops = request.get("stop_sequences")
    first: tuple[int, str] | None = None
    if isinstance(stops, list):
        for stop in stops:
            if isinstance(stop, str) and stop:
                at = text.find(stop)
                if at >= 0 and (first is None or at < first[0]):
                    first = (at, stop)
    limit = request.get("max_tokens")
    chars = 4 * limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    if first is not None and (chars is None or first[0] <= chars):
        return text[: first[0]], "stop_sequence", first[1]
    if chars is not None and len(text) > chars:
        return text[: max(0, chars)], "max_tokens", None
    return text, "end_turn", None


def _negated(sentences: list[list[str]], covered: set[str], window: int) -> bool:
    """Whether a sentence has a negation within ``window`` words of a covered key term."""
    for sentence in sentences:
        hits = [i for i, w in enumerate(sentence) if w in covered]
        negations = [i for i, w in enumerate(sentence) if w in NEGATIONS]
        if any(abs(i - j) <= window for i in hits for j in negations):
            return True
    return False
