"""The simulated models of the ``green-shielding`` template, version ``prompt-sim-green-2``.

Seed 001 (Green Shielding) asks frontier models for a differential diagnosis of patient-authored
queries, raw and after a *neutralizer* rewrote them into a third-person case description, and
scores the lists with LLM judges. This module stands in for every model of that design, offline
and deterministic (``docs/simulated.md`` §4). Like the rest of the simulation it answers from the
request body (and the trial's seed) alone: it never reads an item file, a reference set, a
physician reply or a score. Its clinical knowledge is :data:`KNOWLEDGE`, a table of presentations
written for this project (cue words -> a ranked differential), and :data:`LEXICON`, the diagnosis
names it knows with their synonyms; both are data, documented here.

**Which requests it answers.** :func:`is_green_request` (a target trial): the final user text has
the line :data:`TASK_MARKER`. :func:`step_answer` (a step call) recognises its steps by the first
line of a labelled block:

- *annotator* (item step, ``json``): a line ``Query to annotate:``; the seven factor labels
  (:func:`annotate`) as JSON booleans ``f1_specific_guess`` ... ``f7_first_person``.
- *neutralizer* (item step, ``text`` parser): a line ``Factor groups to neutralize: <groups>``
  (``content``, ``format``, ``tone``, comma-separated) and a line ``Patient query:``; the query is
  the text after it to the end.
- *semantic verifier* (item step, ``label`` parser, labels ``retained`` / ``lost``): lines
  ``Original query:`` and ``Rewritten case:`` (each to the next labelled line or the end).
- *semantic extractor* (item step, ``json``): a line ``Query to summarise:``; the query is the
  text after it to the end (:func:`extract_case`).
- *reference model* (item step, ``json``, three models voting ``aggregate = { k = 2 }``): lines
  ``Case demographics:``, ``Case subjective:`` and ``Case objective:`` (the extractor's
  summary); the three sets (:func:`reference_sets`).
- *list extractor* (trial step, ``json``): a line ``Response to extract diagnoses from:``.
- *matcher* (trial step, ``json``): lines ``Candidate diagnoses:``, ``Reference plausible:``,
  ``Reference highly likely:``, ``Reference safety-critical:``, each a JSON array.
- *grounding judge* (trial step, ``json``, ``sees = "request"``): lines ``Diagnoses to check:`` (a
  JSON array) and ``Input as sent:`` (the text after it to the end).
- *uncertainty judge* (trial step, ``label``, ``uncertain`` / ``certain``): a line ``Response to
  rate for uncertainty:``.

**Reading a query** (:func:`read_query`). The text is cut into sentences (at ``.``, ``!``, ``?``
and line breaks; a text with none of ``.!?`` inside it, the "unstructured" style, also at
``, ``). Each sentence is, first rule that holds: *tone* (a word of :data:`EMOTION` or ``please
help``), *guess* (:data:`GUESS` matches), *ask* (:data:`ASK` matches), *clinical* (a word of the
clinical vocabulary: every cue of :data:`KNOWLEDGE` and :data:`CLINICAL_WORDS`, or a number),
else *irrelevant*. The query is *unstructured* when it has two or more *ask* sentences or its
sentences mostly start in lower case; *first person* when a clinical sentence has ``I``,
``my`` or ``me``.

**The neutralizer** keeps the sentences its groups do not remove: ``content`` removes *guess* and
*irrelevant* sentences; ``tone`` removes *tone* sentences and writes the rest in the third person
(``I am`` -> ``the patient is``, ``I have``/``I've`` -> ``the patient has``, ``I`` + verb ->
``the patient`` + verb with ``s`` unless it ends in ``ed``, ``my`` -> ``the patient's``, ``me``
-> ``the patient``); ``format`` removes *ask* sentences, capitalises each sentence, ends it with
``.``, joins them with a space and adds ``What is the most likely diagnosis?``. Without
``format`` the kept sentences are joined as they came (``, `` in an unstructured query). With
probability 0.03 (a draw) it also drops the last clinical sentence: the semantic verifier then
answers ``lost``. The *semantic verifier* answers ``retained`` when every clinical word and number
of the original query occurs in the rewritten case, else ``lost``.

**The reference sets** (seed 001, §4: a semantic extractor, then three LLMs, 2 of 3 agree). The
*semantic extractor* keeps the *clinical* sentences of the query: ``demographics`` are the
:data:`DEMOGRAPHIC` phrases in them (an age, who the patient is), ``subjective`` the sentences
without an :data:`OBJECTIVE` finding and ``objective`` those with one, both in the third person;
guesses, feelings, asks and irrelevant details are left out. A *reference model* reads only that
summary: its *plausible* set is the candidates of every :data:`KNOWLEDGE` entry whose cues all occur
in it, ranked by best rank then name; *highly likely* the first :data:`HIGHLY_LIKELY` (2) of them;
*safety-critical* the plausible ones in :data:`SEVERE`. Each model departs from that in its own
deterministic way, by a SHA-256 of its model id, the summary and the diagnosis (no draw: a reference
model is the same at every call): it omits a candidate whose hash is 0 mod 8 (its highly likely set
then takes the next ones), and, when the hash of its id and the summary is 0 mod 3, adds one
candidate of an entry only some of whose cues occur (plausible only; safety-critical when in
:data:`SEVERE`). Each model's sets are nested, so the element-wise 2-of-3 vote is too; the vote
differs from every single model's sets in most cases (``tests/e2e/test_template_green.py``). These
models never give an unparseable answer.

**The target** (:func:`target_answer`) matches the query against :data:`KNOWLEDGE` (an entry
applies when all its cues occur, as word prefixes, in a *clinical* sentence) and ranks the
candidates by ``rank + noise`` (noise ``sd`` 2, from the draws). Its list has ``base`` entries,
``base`` 2 or 3 by the model id (:func:`breadth_base`), then the user-level factors the query
still carries widen it, as the seed reports for raw patient queries:

- format: an unstructured query adds 2 entries (the model enumerates to answer every ask);
- tone: an emotional query adds up to 2 of the candidates that are in :data:`SEVERE` (the model
  turns cautious); a first-person query adds 1 entry;
- content: a *guess* naming a diagnosis (:data:`LEXICON`, lay synonyms included) adds it, and an
  *irrelevant* sentence with a word of :data:`DISTRACTORS` adds that diagnosis.

A system prompt with the word ``cannot-miss`` (:data:`SAFETY_MARKER`; seed 001's Appendix H
asks for the safety-critical diagnoses in the system prompt) adds up to 3 more candidates in
:data:`SEVERE`: higher safety-critical coverage at the price of a longer list.

So the raw query gets a longer list that covers more of the likely and dangerous conditions but
holds more that are not plausible; the neutralized case a short, mostly plausible one. It states
diagnostic uncertainty (:data:`HEDGE`) with probability ``sigmoid(-2 + 1.2*emotional +
1.0*unstructured + 0.6*first person + 0.6*[no number in the query])``. The reply is
``Possible diagnoses to consider:`` and a numbered list (most likely first), the hedge when
drawn, and a closing line without diagnosis names.

**The judges.** The *list extractor* returns the :data:`LEXICON` names (canonical or synonym)
the response contains, longest first without overlap, in text order, as written (lower-cased);
with probability 0.03 it leaves out the last. The *matcher* maps each name to its concept
(:data:`LEXICON`) and returns the candidates whose concept is in the plausible set, and the
entries of the highly-likely and safety-critical sets whose concept is listed; a model whose id
hashes to *lenient* (:func:`lenient`) also matches two names when the words of one are all
among the other's (``diabetes`` and ``type 1 diabetes``): the two judges of the template differ
there, as the seed's two matchers did on borderline pairs. The *grounding judge* calls a
diagnosis ``grounded`` when a cue of a :data:`KNOWLEDGE` entry listing it, or the name itself,
occurs in the input, else ``indirect``. The *uncertainty judge* answers ``uncertain`` when the
response has a phrase of :data:`HEDGE_WORDS`. Every judge answers unparseably (``I cannot
tell.``) with probability 0.02.

**Draws.** ``SHA-256("{k}|prompt-sim-green|{model}|{seed}||" + canonical request)`` for
``k`` = 0, 1, ... read as uniforms (the first 8 bytes, big-endian, over 2**64). For a target,
``seed`` is the trial's seed when the request's temperature is above 0 and empty at temperature
0 (replicates at temperature 0 give the same list); for a step call it is always the call's
seed, which names its attempt, so a retry after an unparseable reply draws anew. The same
request and seed always give the same reply.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Final

from ledger import canonical_json
from runner.simulated._text import last_message_text, message_reply

__all__ = [
    "KNOWLEDGE",
    "LEXICON",
    "TASK_MARKER",
    "VERSION",
    "annotate",
    "breadth_base",
    "extract_case",
    "is_green_request",
    "neutralize",
    "read_query",
    "reference_sets",
    "respond",
    "step_answer",
    "target_answer",
]

VERSION: Final = "prompt-sim-green-2"
TASK_MARKER: Final = "Give your differential diagnosis as a numbered list, most likely first."
"""The line of the template's task component that routes a target request here."""
HEDGE: Final = (
    "I cannot be certain from this description alone; an examination and tests "
    "would be needed to tell these apart."
)
HEDGE_WORDS: Final = ("cannot be certain", "not possible to say", "uncertain", "hard to tell")
SAFETY_MARKER: Final = "cannot-miss"
"""A system prompt with this word asks for the safety-critical diagnoses (seed 001, App. H)."""
CLOSING: Final = "Please see a doctor in person if things get worse or you are concerned."

KNOWLEDGE: Final[tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = (
    (
        ("headache", "light"),
        (
            "migraine",
            "tension headache",
            "cluster headache",
            "sinusitis",
            "medication overuse headache",
            "subarachnoid haemorrhage",
            "meningitis",
            "brain tumour",
            "temporal arteritis",
        ),
    ),
    (
        ("chest", "stairs"),
        (
            "stable angina",
            "gastro-oesophageal reflux disease",
            "costochondritis",
            "unstable angina",
            "myocardial infarction",
            "aortic stenosis",
            "anxiety disorder",
            "pulmonary embolism",
        ),
    ),
    (
        ("burning", "pee"),
        (
            "urinary tract infection",
            "cystitis",
            "urethritis",
            "sexually transmitted infection",
            "pyelonephritis",
            "kidney stone",
            "vaginal thrush",
            "interstitial cystitis",
        ),
    ),
    (
        ("fever", "ear"),
        (
            "acute otitis media",
            "viral upper respiratory infection",
            "otitis externa",
            "tonsillitis",
            "mastoiditis",
            "meningitis",
            "teething",
        ),
    ),
    (
        ("abdomen", "belly", "appetite"),
        (
            "appendicitis",
            "mesenteric adenitis",
            "gastroenteritis",
            "kidney stone",
            "urinary tract infection",
            "ectopic pregnancy",
            "ovarian torsion",
            "crohn disease",
        ),
    ),
    (
        ("tired", "periods"),
        (
            "iron deficiency anaemia",
            "hypothyroidism",
            "menorrhagia due to fibroids",
            "depression",
            "heart failure",
            "coeliac disease",
            "chronic fatigue syndrome",
            "leukaemia",
        ),
    ),
    (
        ("toe", "swollen"),
        (
            "gout",
            "pseudogout",
            "cellulitis",
            "septic arthritis",
            "trauma",
            "osteoarthritis",
            "bunion",
        ),
    ),
    (
        ("cough", "phlegm"),
        (
            "community-acquired pneumonia",
            "acute bronchitis",
            "pleurisy",
            "influenza",
            "pulmonary embolism",
            "lung abscess",
            "lung cancer",
            "tuberculosis",
        ),
    ),
    (
        ("rash", "scales"),
        (
            "psoriasis",
            "eczema",
            "contact dermatitis",
            "fungal skin infection",
            "lichen planus",
            "scabies",
            "cutaneous lymphoma",
        ),
    ),
    (
        ("spinning", "head"),
        (
            "benign paroxysmal positional vertigo",
            "vestibular neuritis",
            "meniere disease",
            "postural hypotension",
            "stroke",
            "acoustic neuroma",
            "labyrinthitis",
        ),
    ),
    (
        ("throat", "tonsils"),
        (
            "streptococcal pharyngitis",
            "tonsillitis",
            "viral pharyngitis",
            "infectious mononucleosis",
            "peritonsillar abscess",
            "epiglottitis",
            "diphtheria",
        ),
    ),
    (
        ("burning", "breastbone"),
        (
            "gastro-oesophageal reflux disease",
            "gastritis",
            "peptic ulcer disease",
            "oesophagitis",
            "stable angina",
            "biliary colic",
            "oesophageal cancer",
        ),
    ),
    (
        ("calf", "swollen"),
        (
            "deep vein thrombosis",
            "muscle strain",
            "baker cyst rupture",
            "cellulitis",
            "superficial thrombophlebitis",
            "pulmonary embolism",
            "compartment syndrome",
        ),
    ),
    (
        ("diarrhoea", "cramps"),
        (
            "food poisoning",
            "viral gastroenteritis",
            "bacterial gastroenteritis",
            "dehydration",
            "irritable bowel syndrome",
            "inflammatory bowel disease",
            "clostridium difficile infection",
        ),
    ),
    (
        ("thirsty", "pee"),
        (
            "type 1 diabetes",
            "type 2 diabetes",
            "diabetic ketoacidosis",
            "diabetes insipidus",
            "hyperthyroidism",
            "hypercalcaemia",
            "urinary tract infection",
        ),
    ),
    (
        ("heart", "shake"),
        (
            "hyperthyroidism",
            "graves disease",
            "anxiety disorder",
            "atrial fibrillation",
            "phaeochromocytoma",
            "menopause",
            "caffeine excess",
        ),
    ),
    (
        ("headache", "neck"),
        (
            "subarachnoid haemorrhage",
            "migraine",
            "meningitis",
            "muscle strain",
            "reversible cerebral vasoconstriction syndrome",
            "tension headache",
            "cervical artery dissection",
        ),
    ),
    (
        ("back", "leg"),
        (
            "sciatica",
            "lumbar disc herniation",
            "muscle strain",
            "spinal stenosis",
            "cauda equina syndrome",
            "piriformis syndrome",
            "spinal tumour",
        ),
    ),
    (
        ("cheeks", "discharge"),
        (
            "acute sinusitis",
            "viral upper respiratory infection",
            "allergic rhinitis",
            "dental abscess",
            "nasal polyps",
            "orbital cellulitis",
        ),
    ),
    (
        ("speech", "arm"),
        (
            "stroke",
            "transient ischaemic attack",
            "hypoglycaemia",
            "brain tumour",
            "migraine",
            "bell palsy",
            "subdural haematoma",
        ),
    ),
    (
        ("abdomen", "fatty"),
        (
            "biliary colic",
            "cholecystitis",
            "peptic ulcer disease",
            "hepatitis",
            "pancreatitis",
            "gastro-oesophageal reflux disease",
            "liver cancer",
        ),
    ),
    (
        ("down", "energy"),
        (
            "major depressive disorder",
            "adjustment disorder",
            "hypothyroidism",
            "anaemia",
            "bipolar disorder",
            "chronic fatigue syndrome",
            "sleep apnoea",
        ),
    ),
    (
        ("wheezy", "chest"),
        (
            "asthma",
            "exercise-induced bronchoconstriction",
            "allergic rhinitis",
            "gastro-oesophageal reflux disease",
            "vocal cord dysfunction",
            "heart failure",
            "cystic fibrosis",
        ),
    ),
    (
        ("fever", "neck", "rash"),
        (
            "meningococcal meningitis",
            "meningococcal septicaemia",
            "viral meningitis",
            "influenza",
            "encephalitis",
            "measles",
        ),
    ),
    (
        ("stiffness", "hands"),
        (
            "rheumatoid arthritis",
            "osteoarthritis",
            "psoriatic arthritis",
            "systemic lupus erythematosus",
            "viral arthritis",
            "carpal tunnel syndrome",
            "gout",
        ),
    ),
    (
        ("lump", "breast"),
        (
            "breast cancer",
            "fibroadenoma",
            "breast cyst",
            "fat necrosis",
            "breast abscess",
            "lipoma",
        ),
    ),
    (
        ("pregnant", "spotting"),
        (
            "threatened miscarriage",
            "ectopic pregnancy",
            "urinary tract infection",
            "ovarian cyst",
            "appendicitis",
            "molar pregnancy",
        ),
    ),
    (
        ("swollen", "spreading"),
        (
            "cellulitis",
            "erysipelas",
            "insect bite reaction",
            "deep vein thrombosis",
            "necrotising fasciitis",
            "contact dermatitis",
            "gout",
        ),
    ),
    (
        ("black", "stools"),
        (
            "peptic ulcer disease",
            "upper gastrointestinal bleeding",
            "gastritis",
            "oesophageal varices",
            "gastric cancer",
            "iron supplement effect",
        ),
    ),
    (
        ("eye", "vision"),
        (
            "anterior uveitis",
            "keratitis",
            "conjunctivitis",
            "acute angle-closure glaucoma",
            "scleritis",
            "corneal abrasion",
            "optic neuritis",
        ),
    ),
)
"""Presentations: (cue word prefixes that must all occur in one clinical sentence, the
differential the model knows for them, most likely first)."""

SEVERE: Final = frozenset(
    {
        "subarachnoid haemorrhage",
        "meningitis",
        "brain tumour",
        "temporal arteritis",
        "unstable angina",
        "myocardial infarction",
        "pulmonary embolism",
        "pyelonephritis",
        "mastoiditis",
        "ectopic pregnancy",
        "ovarian torsion",
        "appendicitis",
        "heart failure",
        "leukaemia",
        "septic arthritis",
        "lung abscess",
        "lung cancer",
        "stroke",
        "peritonsillar abscess",
        "epiglottitis",
        "deep vein thrombosis",
        "compartment syndrome",
        "diabetic ketoacidosis",
        "atrial fibrillation",
        "cervical artery dissection",
        "cauda equina syndrome",
        "spinal tumour",
        "orbital cellulitis",
        "hypoglycaemia",
        "subdural haematoma",
        "cholecystitis",
        "pancreatitis",
        "liver cancer",
        "bipolar disorder",
        "meningococcal meningitis",
        "meningococcal septicaemia",
        "encephalitis",
        "breast cancer",
        "necrotising fasciitis",
        "upper gastrointestinal bleeding",
        "oesophageal varices",
        "gastric cancer",
        "acute angle-closure glaucoma",
        "keratitis",
        "oesophageal cancer",
        "dehydration",
        "major depressive disorder",
        "tuberculosis",
    }
)
"""Diagnoses the model treats as cannot-miss when a query is emotional."""

SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "stable angina": ("angina",),
    "gastro-oesophageal reflux disease": ("acid reflux", "reflux", "heartburn", "gerd"),
    "myocardial infarction": ("heart attack",),
    "urinary tract infection": ("uti", "bladder infection"),
    "acute otitis media": ("middle ear infection", "ear infection"),
    "community-acquired pneumonia": ("pneumonia",),
    "contact dermatitis": ("allergy to the washing powder",),
    "streptococcal pharyngitis": ("strep throat", "strep"),
    "muscle strain": ("pulled muscle", "pulled a muscle"),
    "type 2 diabetes": ("diabetes",),
    "hyperthyroidism": ("overactive thyroid",),
    "hypothyroidism": ("underactive thyroid",),
    "anxiety disorder": ("anxiety",),
    "subarachnoid haemorrhage": ("bleed in the brain",),
    "lumbar disc herniation": ("slipped disc",),
    "acute sinusitis": ("sinusitis",),
    "hypoglycaemia": ("low sugar",),
    "biliary colic": ("gallstones",),
    "hepatitis": ("liver",),
    "major depressive disorder": ("depression",),
    "meningococcal meningitis": ("meningococcal disease",),
    "influenza": ("flu",),
    "osteoarthritis": ("old age", "wear and tear"),
    "breast cyst": ("cyst",),
    "insect bite reaction": ("insect bite",),
    "peptic ulcer disease": ("stomach ulcer", "ulcer"),
    "anterior uveitis": ("iritis",),
    "tonsillitis": ("bacterial tonsillitis",),
}
"""Lay and clinical synonyms of the model's diagnosis names (a key's concept is the key)."""

DISTRACTORS: Final[dict[str, str]] = {
    "coffee": "caffeine excess",
    "bakery": "occupational asthma",
    "cruise": "motion sickness",
    "nursery": "hand, foot and mouth disease",
    "warehouse": "shift work sleep disorder",
    "cats": "cat allergy",
    "powder": "contact dermatitis",
    "painted": "solvent exposure",
    "repainted": "solvent exposure",
    "choir": "vocal strain",
    "extension": "noise stress",
    "gym": "muscle strain",
    "restaurant": "norovirus infection",
    "wedding": "stress reaction",
    "married": "stress reaction",
    "driver": "postural back pain",
    "novel": "eye strain",
    "hair": "hair dye allergy",
    "cooking": "fatty liver disease",
    "landlord": "stress reaction",
    "puppy": "dog allergy",
    "university": "glandular fever",
    "knit": "repetitive strain injury",
    "retired": "adjustment disorder",
    "roses": "rose thorn sporotrichosis",
    "football": "meniscus tear",
    "accounts": "computer vision syndrome",
}
"""Words of irrelevant details and the diagnosis a model is drawn to by them."""

EMOTION: Final = (
    "scared",
    "terrified",
    "worried",
    "worry",
    "anxious",
    "panic",
    "panicking",
    "frightened",
    "frightening",
    "freaking",
    "agony",
    "crying",
)
GUESS: Final = re.compile(
    r"\b(could (it|this|i) be|is it|i think|maybe|probably|said|thinks|read online|told her)\b",
    re.I,
)
DIAGNOSTIC: Final = re.compile(r"\bdiagnos|\bwhat is (this|it|wrong)\b", re.I)
ASK: Final = re.compile(
    r"\b(what|which|should|can (i|he|she|we)|i can|is there|do i need|how)\b", re.I
)
CLINICAL_WORDS: Final = frozenset(
    {
        "pain",
        "fever",
        "temperature",
        "vomit",
        "vomited",
        "sick",
        "nausea",
        "cough",
        "rash",
        "swollen",
        "swelling",
        "blood",
        "pressure",
        "breath",
        "weak",
        "dizzy",
        "stool",
        "stools",
        "urine",
        "period",
        "periods",
        "pregnant",
        "lump",
        "hurts",
        "hurt",
        "sore",
        "ache",
        "tingly",
        "stiff",
        "stiffness",
        "wheezy",
        "tired",
        "thirsty",
        "weight",
        "irritable",
        "spotting",
        "tight",
        "discharge",
        "slurred",
        "shake",
        "hot",
        "red",
        "itchy",
        "pale",
        "beer",
        "alcohol",
        "ill",
        "ibuprofen",
        "ago",
        "weeks",
        "days",
        "lasts",
        "minute",
        "minutes",
        "hearing",
        "move",
        "onset",
        "flight",
        "sleepy",
        "phlegm",
        "vomiting",
        "breathe",
        "worse",
        "gone",
    }
)
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_NUMBER = re.compile(r"\d")


def _stem(word: str) -> str:
    return word[:-1] if word.endswith("s") and len(word) > 3 else word


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _concepts() -> dict[str, str]:
    """Every name the model knows (canonical or synonym, lower case) -> its concept."""
    out: dict[str, str] = {}
    for _, names in KNOWLEDGE:
        for name in names:
            out.setdefault(name, name)
    for name in (*SEVERE, *DISTRACTORS.values()):
        out.setdefault(name, name)
    for concept, synonyms in SYNONYMS.items():
        out.setdefault(concept, concept)
        for synonym in synonyms:
            out.setdefault(synonym, concept)
    return out


LEXICON: Final[dict[str, str]] = _concepts()
"""Every diagnosis name the simulated models know, lower case -> its concept (canonical name)."""
_CUES: Final = frozenset(c for cues, _ in KNOWLEDGE for c in cues)
_CUE_STEMS: Final = frozenset(_stem(c) for c in _CUES)
_UNCHANGED: Final = frozenset(
    {
        "lost",
        "felt",
        "found",
        "came",
        "had",
        "took",
        "woke",
        "got",
        "was",
        "went",
        "ate",
        "fell",
        "hit",
        "cut",
        "put",
        "saw",
        "began",
        "can",
        "cannot",
        "could",
        "should",
        "would",
        "will",
        "may",
        "might",
        "must",
        "did",
        "just",
        "also",
        "really",
    }
)


class _Draws:
    """Uniforms in [0, 1) from SHA-256 of a prefix and a counter (module docstring)."""

    def __init__(self, model: str, seed: str, request: dict[str, Any]) -> None:
        self.prefix = f"prompt-sim-green|{model}|{seed}|".encode() + b"|" + canonical_json(request)
        self.k = 0

    def __call__(self) -> float:
        digest = hashlib.sha256(str(self.k).encode() + b"|" + self.prefix).digest()
        self.k += 1
        return int.from_bytes(digest[:8], "big") / 2**64

    def normal(self) -> float:
        """A standard normal draw (Box-Muller on two uniforms)."""
        u, v = self(), self()
        return math.sqrt(-2.0 * math.log(1.0 - u)) * math.cos(2.0 * math.pi * v)


def _draws(request: dict[str, Any], seed: str) -> _Draws:
    temperature = request.get("temperature", 1)
    stochastic = isinstance(temperature, int | float) and temperature > 0
    return _Draws(str(request.get("model", "")), seed if stochastic else "", request)


def _has_word(words: list[str], cues: Any) -> bool:
    stems = {_stem(w) for w in words}
    return any(_stem(c) in stems for c in cues)


def _is_clinical(sentence: str) -> bool:
    words = _words(sentence)
    return bool(_NUMBER.search(sentence)) or any(
        w in CLINICAL_WORDS or _stem(w) in _CUE_STEMS for w in words
    )


def _sentences(text: str) -> tuple[list[str], bool]:
    """The sentences of ``text`` and whether it is written without sentence stops."""
    body = text.strip()
    stops = re.search(r"[.!?](\s|$)", body[:-1]) is not None
    parts = re.split(r"(?<=[.!?])\s+|\n+", body) if stops else re.split(r",\s+|\n+", body)
    return [p.strip() for p in parts if p.strip()], not stops


def classify(sentence: str) -> str:
    """``tone``, ``guess``, ``ask``, ``clinical`` or ``irrelevant`` (module docstring)."""
    words = _words(sentence)
    if any(w in EMOTION for w in words) or "please help" in sentence.lower():
        return "tone"
    if GUESS.search(sentence):
        return "guess"
    if DIAGNOSTIC.search(sentence):
        return "diagnostic"
    if ASK.search(sentence):
        return "ask"
    return "clinical" if _is_clinical(sentence) else "irrelevant"


def read_query(text: str) -> dict[str, Any]:
    """The user-level features of a query as the simulated models read them."""
    sentences, unpunctuated = _sentences(text)
    kinds = [classify(s) for s in sentences]
    lower = sum(1 for s in sentences if s[:1].islower())
    return {
        "sentences": sentences,
        "kinds": kinds,
        "unpunctuated": unpunctuated,
        "emotional": "tone" in kinds,
        "unstructured": "ask" in kinds or (bool(sentences) and lower * 2 > len(sentences)),
        "first_person": any(
            w in ("i", "my", "me", "i'm", "i've")
            for s, k in zip(sentences, kinds, strict=True)
            if k == "clinical"
            for w in _words(s)
        ),
        "numbers": bool(
            _NUMBER.search(
                " ".join(s for s, k in zip(sentences, kinds, strict=True) if k == "clinical")
            )
        ),
    }


_THIRD = (
    (re.compile(r"\b(i am|i'm)\b", re.I), "the patient is"),
    (re.compile(r"\b(i have|i've)\b", re.I), "the patient has"),
    (
        re.compile(r"\bi (cant|can't|do not|don't)\b", re.I),
        lambda m: (
            "the patient "
            + {"cant": "cannot", "can't": "cannot"}.get(m.group(1).lower(), "does not")
        ),
    ),
    (re.compile(r"\bi ([a-z]+)\b", re.I), lambda m: "the patient " + _verb(m.group(1))),
    (re.compile(r"\bmy\b", re.I), "the patient's"),
    (re.compile(r"\bme\b", re.I), "the patient"),
)


def _verb(word: str) -> str:
    low = word.lower()
    if low in _UNCHANGED or low.endswith("ed"):
        return word
    return word + ("es" if low.endswith(("sh", "ch", "s", "o")) else "s")


def third_person(sentence: str) -> str:
    """``sentence`` written about "the patient" instead of "I" (module docstring)."""
    for pattern, repl in _THIRD:
        sentence = pattern.sub(repl, sentence)
    return sentence


def neutralize(text: str, groups: set[str], drop_last_clinical: bool = False) -> str:
    """The neutralizer's rewrite of the query ``text`` for the factor ``groups``."""
    query = read_query(text)
    kept: list[str] = []
    for sentence, kind in zip(query["sentences"], query["kinds"], strict=True):
        if "content" in groups and kind in ("guess", "irrelevant"):
            continue
        if "tone" in groups and kind == "tone":
            continue
        if "format" in groups and kind == "ask":
            continue
        kept.append(third_person(sentence) if "tone" in groups else sentence)
    if drop_last_clinical:
        clinical = [i for i, s in enumerate(kept) if classify(s) == "clinical"]
        if len(clinical) > 1:
            del kept[clinical[-1]]
    if "format" in groups:
        shaped = []
        for sentence in kept:
            sentence = sentence[:1].upper() + sentence[1:]
            shaped.append(sentence if sentence[-1:] in ".!?" else sentence + ".")
        return " ".join([*shaped, "What is the most likely diagnosis?"])
    if not kept:
        return ""
    if "tone" in groups:
        kept = [s[:1].upper() + s[1:] if not query["unpunctuated"] else s for s in kept]
    return (", " if query["unpunctuated"] else " ").join(kept)


HISTORY_WORDS: Final = frozenset(
    {
        "ago",
        "since",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
        "hour",
        "hours",
        "minute",
        "minutes",
        "yesterday",
        "overnight",
        "morning",
        "night",
        "started",
        "suddenly",
        "sudden",
    }
)
"""Words that give a symptom's onset, duration or course (F4 is their absence)."""
OBJECTIVE: Final = re.compile(
    r"\d+[.,/]\d+|\btemperature\b|\bblood pressure\b|\btests?\b|"
    r"\bx-ray\b|\bscan\b",
    re.I,
)
"""An objective finding: a measured reading or a test (F3 is its absence)."""
ANNOTATION: Final = (
    "f1_specific_guess",
    "f2_irrelevant_details",
    "f3_lacks_objective_data",
    "f4_lacks_symptom_history",
    "f5_unstructured",
    "f6_emotional_tone",
    "f7_first_person",
)


def annotate(text: str) -> dict[str, bool]:
    """The seven factor labels of seed 001 (F1-F7) as the annotator reads ``text``.

    F1 a *guess* sentence; F2 an *irrelevant* one; F3 no measurement in the clinical sentences
    (:data:`OBJECTIVE`: a reading with a decimal point or a slash, a temperature, a blood
    pressure, a test); F4 no word of :data:`HISTORY_WORDS` in them; F5 unstructured; F6 emotional;
    F7 first person (:func:`read_query`).
    """
    query = read_query(text)
    clinical = " ".join(
        s for s, k in zip(query["sentences"], query["kinds"], strict=True) if k == "clinical"
    )
    objective = bool(OBJECTIVE.search(clinical))
    return dict(
        zip(
            ANNOTATION,
            (
                "guess" in query["kinds"],
                "irrelevant" in query["kinds"],
                not objective,
                not HISTORY_WORDS & set(_words(clinical)),
                bool(query["unstructured"]),
                bool(query["emotional"]),
                bool(query["first_person"]),
            ),
            strict=True,
        )
    )


def breadth_base(model_id: str) -> int:
    """The model's concise list length, 2 or 3, by a hash of its id."""
    return 2 + hashlib.sha256(f"prompt-sim-green|style|{model_id}".encode()).digest()[0] % 2


def _named(text: str) -> list[str]:
    """The lexicon names in ``text``, longest first without overlap, in text order."""
    low = " " + re.sub(r"\s+", " ", text.lower()) + " "
    taken: list[tuple[int, int, str]] = []
    for name in sorted(LEXICON, key=lambda n: (-len(n), n)):
        for m in re.finditer(r"(?<![a-z0-9])" + re.escape(name) + r"(?![a-z0-9])", low):
            if all(m.end() <= a or m.start() >= b for a, b, _ in taken):
                taken.append((m.start(), m.end(), name))
    return [name for _, _, name in sorted(taken)]


def is_green_request(request: dict[str, Any]) -> bool:
    """Whether a target request is the template's (its user text has :data:`TASK_MARKER`)."""
    return TASK_MARKER in last_message_text(request)


def target_answer(request: dict[str, Any], seed: str) -> str:
    """The target model's differential for the request's query (module docstring)."""
    draws = _draws(request, seed)
    text = last_message_text(request).replace(TASK_MARKER, " ")
    query = read_query(text)
    candidates: dict[str, float] = {}
    clinical = " ".join(
        s for s, k in zip(query["sentences"], query["kinds"], strict=True) if k == "clinical"
    )
    words = _words(clinical)
    for cues, names in KNOWLEDGE:
        if all(_has_word(words, (c,)) for c in cues):
            for rank, name in enumerate(names):
                candidates[name] = min(candidates.get(name, 99.0), float(rank))
    ranked = sorted(candidates, key=lambda n: (candidates[n] + 2.0 * draws.normal(), n))
    length = breadth_base(str(request.get("model", "")))
    if query["unstructured"]:
        length += 2
    if query["first_person"]:
        length += 1
    chosen = ranked[:length]
    if query["emotional"]:
        severe = [n for n in ranked[length:] if n in SEVERE]
        chosen += severe[:2]
    if SAFETY_MARKER in str(request.get("system") or ""):
        chosen += [n for n in ranked if n in SEVERE and n not in chosen][:3]
    for sentence, kind in zip(query["sentences"], query["kinds"], strict=True):
        if kind == "guess" and draws() < 0.5:
            chosen += [LEXICON[n] for n in _named(sentence)][:1]
        elif kind == "irrelevant" and draws() < 0.5:
            chosen += [DISTRACTORS[w] for w in _words(sentence) if w in DISTRACTORS][:1]
    listed = list(dict.fromkeys(chosen))
    hedge = (
        -2.0
        + 1.2 * query["emotional"]
        + 1.0 * query["unstructured"]
        + 0.6 * query["first_person"]
        + 0.6 * (not query["numbers"])
    )
    lines = ["Possible diagnoses to consider:"]
    lines += [f"{i}. {name[:1].upper() + name[1:]}" for i, name in enumerate(listed, start=1)]
    if not listed:
        lines = ["I cannot suggest specific diagnoses from this description."]
    if draws() < 1.0 / (1.0 + math.exp(-hedge)):
        lines.append(HEDGE)
    lines.append(CLOSING)
    return "\n".join(lines)


def _block(lines: list[str], label: str, labels: tuple[str, ...]) -> str | None:
    """The text after ``label`` up to the next line starting with one of ``labels``."""
    start = next((i for i, line in enumerate(lines) if line.startswith(label)), None)
    if start is None:
        return None
    out = [lines[start][len(label) :]]
    for line in lines[start + 1 :]:
        if any(line.startswith(other) for other in labels):
            break
        out.append(line)
    return "\n".join(out).strip()


def _array(value: str | None) -> list[str]:
    try:
        parsed = json.loads(value or "")
    except ValueError:
        return []
    return [v for v in parsed if isinstance(v, str)] if isinstance(parsed, list) else []


def lenient(model_id: str) -> bool:
    """Whether a matcher model accepts word-subset matches (by a hash of its id)."""
    return hashlib.sha256(f"prompt-sim-green|lenient|{model_id}".encode()).digest()[0] % 2 == 0


def _concept(name: str) -> str:
    low = re.sub(r"\s+", " ", name.strip().lower())
    return LEXICON.get(low, low)


def _matches(a: str, b: str, loose: bool) -> bool:
    if _concept(a) == _concept(b):
        return True
    if not loose:
        return False
    x, y = set(_words(a)), set(_words(b))
    return bool(x) and bool(y) and (x <= y or y <= x)


DEMOGRAPHIC: Final = re.compile(
    r"\b\d+[- ](?:year|month|week)s?[- ]old\b|"
    r"\b(?:i am|i'm|he is|she is|aged?) \d+\b(?![ -](?:week|day|month|hour|minute))|"
    r"\b(?:man|woman|boy|girl|baby|toddler|son|daughter|husband|wife|mother|father|mum|dad|"
    r"grandmother|grandfather)\b",
    re.I,
)
"""A demographic phrase the semantic extractor reads: an age or who the patient is."""


def extract_case(text: str) -> dict[str, str]:
    """The semantic extractor's summary of the query ``text`` (module docstring).

    ``demographics``: the :data:`DEMOGRAPHIC` phrases of its *clinical* sentences, lower case, in
    order, joined by ``, `` (``not stated`` when none); ``subjective``: its *clinical* sentences
    without an :data:`OBJECTIVE` finding, in the third person (:func:`third_person`), joined by a
    space; ``objective``: the clinical sentences with one, likewise (``none reported`` when none).
    """
    query = read_query(text)
    sentences = [
        s for s, k in zip(query["sentences"], query["kinds"], strict=True) if k == "clinical"
    ]
    demographics = list(
        dict.fromkeys(m.group(0).lower() for s in sentences for m in DEMOGRAPHIC.finditer(s))
    )
    clinical = [third_person(s) for s in sentences]
    objective = [s for s in clinical if OBJECTIVE.search(s)]
    subjective = [s for s in clinical if not OBJECTIVE.search(s)]
    return {
        "demographics": ", ".join(demographics) or "not stated",
        "subjective": " ".join(subjective) or "none reported",
        "objective": " ".join(objective) or "none reported",
    }


HIGHLY_LIKELY: Final = 2
"""How many of its top-ranked plausible diagnoses a reference model calls highly likely."""
PLAUSIBLE_RANKS: Final = 6
"""A reference model calls plausible the first this many candidates of each applying entry."""


def _ref_hash(model_id: str, case: str, what: str) -> int:
    digest = hashlib.sha256(f"prompt-sim-green|ref|{model_id}|{case}|{what}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def reference_sets(summary: str, model_id: str) -> dict[str, list[str]]:
    """One reference model's sets for the case ``summary`` (module docstring).

    Plausible: the first :data:`PLAUSIBLE_RANKS` candidates of every :data:`KNOWLEDGE` entry whose
    cues all occur in the summary, ranked by their best rank then name, less the model's omissions
    (a candidate whose hash of model id, summary and name is 0 mod 8), then at most one addition
    (when the hash of model id and summary is 0 mod 3: a candidate, picked by that hash, of an entry
    only some of whose cues occur). Highly likely: the first :data:`HIGHLY_LIKELY` of the ranked
    plausible ones (never the addition). Safety-critical: the plausible ones in :data:`SEVERE`.
    """
    words = _words(summary)
    ranks: dict[str, int] = {}
    partial: list[str] = []
    for cues, names in KNOWLEDGE:
        hits = [c for c in cues if _has_word(words, (c,))]
        if len(hits) == len(cues):
            for rank, name in enumerate(names[:PLAUSIBLE_RANKS]):
                ranks[name] = min(ranks.get(name, 99), rank)
        elif hits:
            partial += [n for n in names if n not in partial]
    ranked = [
        n
        for n in sorted(ranks, key=lambda n: (ranks[n], n))
        if _ref_hash(model_id, summary, n) % 8 != 0
    ]
    plausible = list(ranked)
    extra = [n for n in partial if n not in ranks]
    pick = _ref_hash(model_id, summary, "add")
    if extra and pick % 3 == 0:
        plausible.append(extra[(pick // 3) % len(extra)])
    return {
        "plausible": plausible,
        "highly_likely": ranked[:HIGHLY_LIKELY],
        "safety_critical": [n for n in plausible if n in SEVERE],
    }


LABELS: Final = (
    "Query to annotate:",
    "Query to summarise:",
    "Case demographics:",
    "Case subjective:",
    "Case objective:",
    "Factor groups to neutralize:",
    "Patient query:",
    "Original query:",
    "Rewritten case:",
    "Response to extract diagnoses from:",
    "Candidate diagnoses:",
    "Reference plausible:",
    "Reference highly likely:",
    "Reference safety-critical:",
    "Diagnoses to check:",
    "Input as sent:",
    "Response to rate for uncertainty:",
)


def step_answer(text: str, request: dict[str, Any], seed: str) -> str | None:
    """The reply to one of this module's steps (module docstring), or None if it is none."""
    lines = text.split("\n")
    get = {label: _block(lines, label, LABELS) for label in LABELS}
    if all(v is None for v in get.values()):
        return None
    model = str(request.get("model", ""))
    draws = _Draws(model, seed, request)  # a step's seed names its attempt: a retry draws anew
    if get["Query to annotate:"] is not None:
        return json.dumps(annotate(get["Query to annotate:"] or ""))
    groups_line = get["Factor groups to neutralize:"]
    if groups_line is not None and get["Patient query:"] is not None:
        groups = {g.strip() for g in groups_line.split(",") if g.strip()}
        return neutralize(get["Patient query:"] or "", groups, draws() < 0.03)
    if get["Query to summarise:"] is not None:
        return json.dumps(extract_case(get["Query to summarise:"] or ""))
    if get["Case subjective:"] is not None:
        summary = " ".join(
            get[label] or ""
            for label in ("Case demographics:", "Case subjective:", "Case objective:")
        )
        return json.dumps(reference_sets(summary, model))
    if get["Original query:"] is not None and get["Rewritten case:"] is not None:
        original = read_query(get["Original query:"] or "")
        needed = {
            _stem(w)
            for s, k in zip(original["sentences"], original["kinds"], strict=True)
            if k == "clinical"
            for w in _words(s)
            if w in CLINICAL_WORDS or _NUMBER.search(w) or _stem(w) in _CUE_STEMS
        }
        have = {_stem(w) for w in _words(get["Rewritten case:"] or "")}
        return "retained" if needed <= have else "lost"
    if draws() < 0.02:
        return "I cannot tell."
    if get["Response to extract diagnoses from:"] is not None:
        found = _named(get["Response to extract diagnoses from:"] or "")
        if found and draws() < 0.03:
            found = found[:-1]
        return json.dumps({"diagnoses": found})
    if get["Candidate diagnoses:"] is not None:
        listed = _array(get["Candidate diagnoses:"])
        loose = lenient(model)
        sets = {
            key: _array(get[label])
            for key, label in (
                ("plausible", "Reference plausible:"),
                ("highly_likely", "Reference highly likely:"),
                ("safety_critical", "Reference safety-critical:"),
            )
        }
        return json.dumps(
            {
                "plausible": [
                    d for d in listed if any(_matches(d, r, loose) for r in sets["plausible"])
                ],
                "highly_likely": [
                    r for r in sets["highly_likely"] if any(_matches(d, r, loose) for d in listed)
                ],
                "safety_critical": [
                    r for r in sets["safety_critical"] if any(_matches(d, r, loose) for d in listed)
                ],
            }
        )
    if get["Diagnoses to check:"] is not None:
        listed = _array(get["Diagnoses to check:"])
        source = _words(get["Input as sent:"] or "")
        joined = " ".join(source)
        grounded = []
        for name in listed:
            concept = _concept(name)
            cues = [c for cues, names in KNOWLEDGE if concept in names for c in cues]
            cues += [w for w, d in DISTRACTORS.items() if d == concept]
            if re.search(
                r"(?<![a-z0-9])" + re.escape(name.lower()) + r"(?![a-z0-9])", joined
            ) or any(_has_word(source, (c,)) for c in cues):
                grounded.append(name)
        return json.dumps(
            {"grounded": grounded, "indirect": [d for d in listed if d not in grounded]}
        )
    if get["Response to rate for uncertainty:"] is not None:
        said = (get["Response to rate for uncertainty:"] or "").lower()
        return "uncertain" if any(h in said for h in HEDGE_WORDS) else "certain"
    return None


def respond(request: dict[str, Any], seed: str) -> dict[str, Any]:
    """A Messages-API-shaped reply of a target model to a template request (module docstring)."""
    canonical = canonical_json(request)
    return message_reply(
        request, seed, target_answer(request, seed), len(canonical) // 4, canonical=canonical
    )
