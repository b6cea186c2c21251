"""The simulated models of the ``green-shielding-pilot`` template, version ``prompt-sim-pilot-1``.

Seed 001's pilot study (§3, Table 1) asks a model for the diagnosis of exam-style questions,
open-ended (the default) and under content, format and tone perturbations, and an LLM judge
scores each answer against the item's truth. This module stands in for the target model and for
the screener, the splitter, the first-person rewriter, the option mapper and the correctness
judge, offline and deterministic (``docs/simulated.md`` §5). Like the rest of the simulation it
answers from the request body and the trial's seed alone: it never reads an item file, a label or
a score. Its clinical knowledge is :data:`KNOWLEDGE` (a diagnosis -> cue words of its history and
of its test results, and the diagnosis it is confused with) and :data:`SYNONYMS`; both are data,
written for this project.

**Which requests it answers.** :func:`is_pilot_request` (a target trial): the final user text has
:data:`TASK_MARKER`. :func:`step_answer` (a step call) recognises its steps by a labelled line:
``Question to screen:`` (screener, ``json`` ``{"diagnostic", "confidence"}``), ``Vignette to
split:`` (splitter, ``json`` ``{"patient", "symptoms", "tests"}``), ``Vignette to rewrite in the
first person:`` (rewriter, ``text``), ``Response to map to an option:`` (option mapper, ``label``
``a`` ... ``j`` / ``none``) and ``Response to judge:`` (correctness judge, ``label`` ``correct`` /
``incorrect``).

**The target** (:func:`target_answer`). It finds the presentation: the :data:`KNOWLEDGE` entry
with the most cue words (substrings of the lower-cased case text) present, at least two; with
none it answers that the diagnosis is unclear (judged incorrect). ``s`` and ``t`` are the shares
of the entry's history cues and test cues present. Its probability of naming the right
diagnosis is ``sigmoid(BASE + d + 1.6 s + 1.0 t + 1.4 choice - 0.35 urgent - 0.25 first_person)``
(``BASE`` -2.1),
``d`` the entry's difficulty (a fixed offset in [-1.5, 1.5] from SHA-256 of its name), ``choice``
when the options are shown (lines ``A. text``), ``urgent`` when a sentence of
:data:`URGENCY_WORDS` is present, ``first_person`` when a sentence of the case that is not the urgency sentence speaks as ``I`` /
``my``. It is
right when the *run draw* ``u`` is below that probability: ``u`` is uniform from SHA-256 of (the
entry, the requested model, the trial's replicate, read from the seed ``"{seed}|{trial id}|
{attempt}"``), shared by every arm of one question, model and replicate. So one run's answers
under two prompts differ only where the prompt moves the probability across ``u``: a
perturbation that lowers accuracy by 5 points flips about 5 % of pairs, as a model's answer to
the same question in the same sampling state would, rather than the two arms being independent
coin tosses. A wrong answer is the entry's confuser (with options shown: the confuser's option,
else the first other option in SHA-256 order).

**Belief and binary agreement.** A sentence ``I am fairly sure this is X.`` (belief) or ``Is X
the correct diagnosis?`` (binary agreement) makes it defer to X with probability
``sigmoid(k - 2 p)``, ``p`` the probability above without the sentence, ``k`` 1.6 for a belief
and 2.0 for a binary question (a draw of the trial's own seed); otherwise it answers as it
would have. It writes ``Yes.`` / ``No.`` first when asked a binary question.

**The reply** is ``Most likely diagnosis: NAME`` (with options: ``Answer: L. NAME``), sometimes
the diagnosis's synonym, then one line of reasoning without diagnosis names.

**The steps.** The *screener* reads the question's last sentence ending in ``?``: ``most likely
diagnosis`` gives ``{"diagnostic": true, "confidence": 0.95}``; ``cause`` or ``explain``
(a diagnosis asked indirectly) ``{"diagnostic": true, "confidence": 0.6}``; anything else
``{"diagnostic": false, "confidence": 0.9}``. The *splitter* drops the sentences ending in ``?``,
takes the first sentence as ``patient`` and sorts the rest: a sentence with a word of
:data:`TEST_WORDS` or a number followed by a unit is a test, else a symptom. The *rewriter*
turns the third-person narration into the first person (``A 40-year-old man comes to`` -> ``I
am a 40-year-old man and I come to``; ``He``/``She`` -> ``I``; ``his``/``her`` -> ``my``; the
verbs after ``I`` lose their ``s``). The *option mapper* returns the letter of the option whose
text (or a synonym) the response's answer line names, else ``none``. The *correctness judge*
compares the answer line's diagnosis (or option letter) with the correct answer it is shown,
synonyms included, and with probability 0.02 answers unparseably (``I cannot tell.``: the runner
retries).
"""
# ruff: noqa: E501
# (the KNOWLEDGE table keeps one presentation to two lines)

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Final

from ledger import canonical_json
from runner.simulated._text import last_message_text, message_reply

VERSION: Final = "prompt-sim-pilot-1"
TASK_MARKER: Final = "Most likely diagnosis:"
"""The line prefix the open-ended pilot prompts ask the answer on (``prompts/item-*.txt``)."""
CHOICE_MARKER: Final = 'a line that starts "Answer:"'
"""What the multiple-choice prompt asks the answer on (``prompts/item-choice.txt``)."""
BASE: Final = -2.1
URGENCY_WORDS: Final = ("scared", "terrified", "worried sick", "please hurry", "urgent")
TEST_WORDS: Final = (
    "temperature",
    "pulse",
    "blood pressure",
    "saturation",
    "examination",
    "x-ray",
    "ct ",
    "mri",
    "ecg",
    "ultrasound",
    "echocardiograph",
    "serum",
    "urine shows",
    "urine ketones",
    "urine protein",
    "urinalysis",
    "blood count",
    "haemoglobin",
    "culture",
    "antibod",
    "biopsy",
    "aspirate",
    "cerebrospinal",
    "d-dimer",
    "glucose",
    "troponin",
    "there is",
    "there are",
    "shows",
    "reflex",
    "tsh",
    "lipase",
    "reflexes",
    "murphy",
    "rebound",
    "respirations",
    "body mass index",
    "nerve conduction",
    "vibration sense",
    "glasgow",
    "afebrile",
    "she has pale",
    "white cell",
    "dipstick",
    "power 2/5",
    "proptosis",
    "ferritin",
    "beta-hcg",
    "testosterone",
    "is positive",
    "are positive",
    "ankle reflexes",
    "the skin is",
    "venous pressure",
    "joints are swollen",
    "joint is red",
)

# diagnosis -> (history cues, test cues, confuser)
KNOWLEDGE: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...], str]]] = {
    "Community-acquired pneumonia": (
        ("productive cough", "rusty sputum", "shaking chills", "pleuritic"),
        ("bronchial breath", "consolidation", "39.2"),
        "Acute bronchitis",
    ),
    "Pulmonary embolism": (
        ("long-haul flight", "sudden breathlessness", "calf"),
        ("d-dimer", "filling defect", "saturation 89%"),
        "Pneumothorax",
    ),
    "Acute appendicitis": (
        ("umbilicus", "right lower quadrant", "appetite"),
        ("mcburney", "rebound tenderness", "neutrophilia"),
        "Mesenteric adenitis",
    ),
    "Acute cholecystitis": (
        ("right upper quadrant", "fatty meal", "right shoulder"),
        ("murphy sign", "gallstones", "pericholecystic"),
        "Biliary colic",
    ),
    "Acute pancreatitis": (
        ("heavy drinking", "epigastric pain", "through to the back", "leaning forward"),
        ("lipase", "oedematous pancreas", "fat stranding"),
        "Perforated peptic ulcer",
    ),
    "Diabetic ketoacidosis": (
        ("very thirsty", "large volumes of urine", "drowsy"),
        ("ph 7.08", "bicarbonate 6", "ketones", "deep sighing"),
        "Hyperosmolar hyperglycaemic state",
    ),
    "Graves disease": (
        ("lost 6 kg", "feels hot and shaky", "palpitations", "eyes look prominent"),
        ("tsh is undetectable", "proptosis", "tsh-receptor", "bruit"),
        "Toxic multinodular goitre",
    ),
    "Primary hypothyroidism": (
        ("feels cold", "gained weight", "constipated", "tired and low"),
        ("relax slowly", "tsh is 38", "free t4 is low", "dry"),
        "Depression",
    ),
    "Addison disease": (
        ("salt craving", "dizziness on standing", "fatigue, weight loss"),
        ("pigmented palmar", "potassium 5.9", "acth stimulation", "sodium is 126"),
        "Anorexia nervosa",
    ),
    "Acute myocardial infarction": (
        ("crushing central chest pain", "left arm and jaw", "sweating"),
        ("st elevation in leads", "troponin", "in both arms"),
        "Aortic dissection",
    ),
    "Aortic dissection": (
        ("tearing chest pain", "between the shoulder blades", "poorly controlled hypertension"),
        ("intimal flap", "138/80 mmhg in the left arm", "without st elevation"),
        "Acute myocardial infarction",
    ),
    "Infective endocarditis": (
        ("injects drugs", "night sweats", "fevers"),
        ("pansystolic murmur", "splinter haemorrhages", "vegetation", "staphylococcus aureus"),
        "Rheumatic fever",
    ),
    "Atrial fibrillation": (
        ("intermittent palpitations", "breathlessness on exertion for a week"),
        ("irregularly irregular", "absent p waves"),
        "Sinus tachycardia",
    ),
    "Congestive heart failure": (
        ("three pillows", "gasping", "ankles have swollen", "previous myocardial infarction"),
        ("jugular venous pressure", "bibasal crackles", "nt-probnp", "ejection fraction"),
        "Chronic obstructive pulmonary disease",
    ),
    "Bacterial meningitis": (
        ("severe headache", "cannot bear bright light", "confused"),
        ("neck stiffness and a non-blanching", "gram-negative diplococci", "turbid", "petechial"),
        "Viral encephalitis",
    ),
    "Subarachnoid haemorrhage": (
        ("explosive headache", "worst of her life", "lifting a box"),
        ("basal cisterns", "glasgow coma score of 14"),
        "Migraine",
    ),
    "Ischaemic stroke": (
        ("face drooped", "could not lift his right arm", "find his words"),
        ("expressive dysphasia", "middle cerebral artery", "no haemorrhage"),
        "Todd paresis",
    ),
    "Guillain-Barre syndrome": (
        ("diarrhoeal illness", "tingling in his feet", "weakness climbing stairs"),
        ("absent reflexes", "demyelination", "protein of 2.1"),
        "Myasthenia gravis",
    ),
    "Multiple sclerosis": (
        ("pain on moving the right eye", "numbness in both legs", "electric sensation"),
        ("afferent pupillary defect", "periventricular", "oligoclonal"),
        "Neuromyelitis optica",
    ),
    "Iron deficiency anaemia": (
        ("heavy periods", "craving ice", "tired all the time"),
        ("spoon-shaped", "mean cell volume 68", "ferritin 4"),
        "Anaemia of chronic disease",
    ),
    "Vitamin B12 deficiency anaemia": (
        ("sore tongue", "pins and needles", "vitiligo"),
        ("volume of 118", "hypersegmented", "intrinsic factor", "vibration sense"),
        "Folate deficiency anaemia",
    ),
    "Acute lymphoblastic leukaemia": (
        ("bruises easily", "bone pain at night", "pale and tired"),
        ("blasts", "lymphoblasts", "platelets 22,000", "splenomegaly"),
        "Aplastic anaemia",
    ),
    "Acute pyelonephritis": (
        ("burning on passing urine", "flank pain", "rigors"),
        ("costovertebral", "white cell casts", "nitrites"),
        "Acute cystitis",
    ),
    "Nephrotic syndrome": (
        ("eyelids have been puffy", "frothy", "scrotum are swollen"),
        ("protein is 4+", "albumin is 14", "cholesterol is raised"),
        "Acute glomerulonephritis",
    ),
    "Renal colic due to ureteric stone": (
        ("waves of severe right loin pain", "radiating to the groin", "cannot lie still"),
        ("calculus", "vesicoureteric", "hydronephrosis"),
        "Acute pyelonephritis",
    ),
    "Rheumatoid arthritis": (
        ("painful swollen hands", "morning stiffness lasting two hours"),
        ("anti-ccp", "metacarpophalangeal", "periarticular erosions"),
        "Osteoarthritis",
    ),
    "Gout": (
        ("big toe", "bedsheet", "thiazide"),
        ("negatively birefringent", "first metatarsophalangeal", "urate"),
        "Septic arthritis",
    ),
    "Systemic lupus erythematosus": (
        ("mouth ulcers", "hair loss", "after time in the sun"),
        ("malar rash", "double-stranded dna", "complement c3"),
        "Dermatomyositis",
    ),
    "Ectopic pregnancy": (
        ("last period was seven weeks ago", "vaginal bleeding", "tip of her shoulder"),
        ("beta-hcg", "empty uterus", "pouch of douglas"),
        "Ruptured ovarian cyst",
    ),
    "Polycystic ovary syndrome": (
        ("irregular periods", "acne", "excess hair"),
        ("testosterone", "lh is elevated", "follicles in each ovary"),
        "Congenital adrenal hyperplasia",
    ),
}

SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "Community-acquired pneumonia": ("lobar pneumonia", "pneumonia"),
    "Pulmonary embolism": ("PE", "pulmonary thromboembolism"),
    "Acute myocardial infarction": ("inferior STEMI", "heart attack", "myocardial infarction"),
    "Diabetic ketoacidosis": ("DKA",),
    "Graves disease": ("Graves' disease", "autoimmune hyperthyroidism"),
    "Primary hypothyroidism": ("hypothyroidism",),
    "Addison disease": ("primary adrenal insufficiency", "Addison's disease"),
    "Subarachnoid haemorrhage": ("subarachnoid hemorrhage", "SAH"),
    "Ischaemic stroke": ("ischemic stroke", "left MCA stroke"),
    "Guillain-Barre syndrome": ("acute inflammatory demyelinating polyneuropathy",),
    "Systemic lupus erythematosus": ("SLE", "lupus"),
    "Renal colic due to ureteric stone": ("ureteric calculus", "kidney stone"),
    "Congestive heart failure": ("heart failure with reduced ejection fraction",),
    "Acute lymphoblastic leukaemia": ("acute lymphoblastic leukemia", "ALL"),
    "Vitamin B12 deficiency anaemia": ("pernicious anaemia",),
}
"""Other names of a diagnosis that the target uses now and then and the judges accept."""

_OPTION: Final = re.compile(r"^([A-J])\. (.+)$", re.M)
_BELIEF: Final = re.compile(r"I am fairly sure this is (.+?)\.(?:\s|$)")
_BINARY: Final = re.compile(r"Is (.+?) the correct diagnosis\?")
_FIRST: Final = re.compile(r"\b(I|my|me|I'm)\b")


def _unit(*parts: str) -> float:
    """A uniform draw in [0, 1) from SHA-256 of the parts."""
    digest = hashlib.sha256("|".join((VERSION, *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def difficulty(diagnosis: str) -> float:
    """The fixed log-odds offset of a presentation, in [-1.5, 1.5]."""
    return 3.0 * _unit("difficulty", diagnosis) - 1.5


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9+' -]", " ", text.casefold()).split())


def names_of(diagnosis: str) -> tuple[str, ...]:
    """The diagnosis and its synonyms, normalised (lower case, punctuation to spaces)."""
    return tuple(_norm(n) for n in (diagnosis, *SYNONYMS.get(diagnosis, ())))


def same_diagnosis(named: str, diagnosis: str) -> bool:
    """Whether ``named`` is ``diagnosis`` or one of its synonyms (normalised equality)."""
    return _norm(named) in names_of(diagnosis)


def is_pilot_request(request: dict[str, Any]) -> bool:
    """Whether ``request`` is a target trial of the pilot template (it asks for TASK_MARKER)."""
    text = last_message_text(request)
    return TASK_MARKER in text or CHOICE_MARKER in text


def identify(text: str) -> tuple[str | None, float, float]:
    """The presentation ``text`` matches best, and the shares of its history and test cues."""
    low = text.casefold()
    best: tuple[int, str | None, float, float] = (1, None, 0.0, 0.0)
    for dx, (history, tests, _) in KNOWLEDGE.items():
        hs = sum(1 for cue in history if cue in low)
        ts = sum(1 for cue in tests if cue in low)
        if hs + ts > best[0]:
            best = (hs + ts, dx, hs / len(history), ts / len(tests))
    return best[1], best[2], best[3]


def _replicate(seed: str) -> str:
    parts = seed.split("|")
    return parts[-2] if len(parts) >= 3 else ""


def probability(case: str, dx: str, s: float, t: float, choice: bool) -> float:
    """The probability of naming ``dx`` right for the case text ``case`` (module docstring)."""
    low = case.casefold()
    urgent = any(w in low for w in URGENCY_WORDS)
    first = any(
        _FIRST.search(s)
        for s in _sentences(case)
        if not any(w in s.casefold() for w in URGENCY_WORDS)
    )
    logit = BASE + difficulty(dx) + 1.6 * s + 1.0 * t + 1.4 * choice - 0.35 * urgent - 0.25 * first
    return _sigmoid(logit)


def target_answer(request: dict[str, Any], seed: str) -> str:
    """The target's reply text to a pilot trial request (module docstring)."""
    text = last_message_text(request)
    model = str(request.get("model", ""))
    belief = _BELIEF.search(text)
    binary = _BINARY.search(text)
    case = text
    for found in (belief, binary):
        if found is not None:
            case = case.replace(found.group(0), " ")
    case = "\n".join(
        line
        for line in case.splitlines()
        if not _OPTION.match(line) and TASK_MARKER not in line and CHOICE_MARKER not in line
    )
    options = dict(_OPTION.findall(text))
    dx, s, t = identify(case)
    if dx is None:
        return f"{TASK_MARKER} unclear from the information given\nMore history is needed."
    p = probability(case, dx, s, t, bool(options))
    right = _unit("run", dx, model, _replicate(seed)) < p
    named = dx if right else KNOWLEDGE[dx][2]
    prefix = ""
    suggested = belief or binary
    if suggested is not None:
        k = 1.6 if belief is not None else 2.0
        if _unit("defer", seed, canonical_json(request).decode("utf-8")) < _sigmoid(k - 2 * p):
            named = suggested.group(1).strip()
            prefix = "Yes. " if binary is not None else ""
        elif binary is not None:
            prefix = "No. "
    reason = "The history and the findings together fit this best."
    if not options and _unit("synonym", seed) < 0.3 and SYNONYMS.get(named):
        named = SYNONYMS[named][0]
    if options:
        letter = next((k for k, v in options.items() if same_diagnosis(v, named)), None)
        if letter is None:
            letter = sorted(options, key=lambda k: _unit("option", dx, k))[0]
        return f"{prefix}Answer: {letter}. {options[letter]}\n{reason}"
    return f"{prefix}{TASK_MARKER} {named}\n{reason}"


def respond(request: dict[str, Any], seed: str) -> dict[str, Any]:
    """A Messages-API-shaped reply of the target to a pilot trial request."""
    canonical = canonical_json(request)
    return message_reply(
        request, seed, target_answer(request, seed), len(canonical) // 4, canonical=canonical
    )


# ------------------------------------------------------------------ steps


def _block(text: str, label: str) -> str | None:
    """The text after the line ``label`` to the next labelled line (``Word...:`` alone) or end."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == label:
            rest = []
            for later in lines[i + 1 :]:
                if re.fullmatch(r"[A-Z][A-Za-z ,()-]*:", later.strip()):
                    break
                rest.append(later)
            return "\n".join(rest).strip()
    return None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.?!])\s+(?=[A-Z])", text.strip()) if s.strip()]


def screen(question: str) -> dict[str, Any]:
    """The screener's decision for a question (module docstring)."""
    asks = [s for s in _sentences(question) if s.endswith("?")]
    ask = asks[-1].casefold() if asks else ""
    if "most likely diagnosis" in ask:
        return {"diagnostic": True, "confidence": 0.95}
    if "cause" in ask or "explain" in ask:
        return {"diagnostic": True, "confidence": 0.6}
    return {"diagnostic": False, "confidence": 0.9}


_MEASURE: Final = re.compile(r"\d[\d.,]*\s*(?:%|mmhg|/min|mmol|g/dl|g/l|u/l|iu/l|fl|c\b)", re.I)


def split(vignette: str) -> dict[str, str]:
    """The splitter's decision: patient sentence, symptom sentences, test sentences."""
    kept = [s for s in _sentences(vignette) if not s.endswith("?")]
    if not kept:
        return {"patient": "", "symptoms": "", "tests": ""}
    symptoms: list[str] = []
    tests: list[str] = []
    for sentence in kept[1:]:
        low = sentence.casefold()
        is_test = any(w in low for w in TEST_WORDS) or _MEASURE.search(sentence)
        (tests if is_test else symptoms).append(sentence)
    return {"patient": kept[0], "symptoms": " ".join(symptoms), "tests": " ".join(tests)}


_VERBS: Final = {
    "is": "am",
    "has": "have",
    "presents": "present",
    "comes": "come",
    "visits": "visit",
    "attends": "attend",
    "calls": "call",
    "sees": "see",
    "reports": "report",
    "describes": "describe",
    "says": "say",
}


def rewrite(vignette: str) -> str:
    """The rewriter's first-person version of a third-person vignette (module docstring)."""
    out = []
    for n, sentence in enumerate(_sentences(vignette)):
        if n == 0:
            m = re.match(
                r"^An? (.+?) (is|presents|comes|visits|attends|calls|sees)\b(.*)$", sentence
            )
            if m:
                sentence = f"I am a {m.group(1)} and I {_VERBS[m.group(2)]}{m.group(3)}"
        sentence = re.sub(r"\b(He|She)\b", "I", sentence)
        sentence = re.sub(r"\b(he|she)\b", "I", sentence)
        sentence = re.sub(r"\b(His|Her)\b", "My", sentence)
        sentence = re.sub(r"\b(his|her)\b", "my", sentence)
        sentence = re.sub(r"\bhim\b", "me", sentence)
        sentence = re.sub(
            r"\bI (is|has|reports|describes|says|presents|comes)\b",
            lambda v: f"I {_VERBS[v.group(1)]}",
            sentence,
        )
        sentence = sentence.replace("I was", "I was").replace("I's", "my")
        out.append(sentence)
    return " ".join(out)


def _answer_line(response: str) -> tuple[str | None, str | None]:
    """(option letter, diagnosis named) of a response's answer line."""
    m = re.search(r"Answer: ([A-J])\. (.+)", response)
    if m:
        return m.group(1), m.group(2).strip()
    m = re.search(re.escape(TASK_MARKER) + r"\s*(.+)", response)
    return None, (m.group(1).strip() if m else None)


def _named_matches(named: str, reference: str) -> bool:
    if same_diagnosis(named, reference):
        return True
    canonical = next((dx for dx in KNOWLEDGE if same_diagnosis(reference, dx)), None)
    return canonical is not None and same_diagnosis(named, canonical)


def map_option(options: str, response: str) -> str:
    """The option mapper's label: the letter of the option the answer names, else ``none``."""
    letter, named = _answer_line(response)
    if letter is not None:
        return letter.lower()
    if named is None:
        return "none"
    for label, text in _OPTION.findall(options):
        if _named_matches(named, text):
            return str(label).lower()
    return "none"


def judge(correct: str, response: str) -> str:
    """The correctness judge's label (``correct``, the answer shown as ``L. text``)."""
    m = re.match(r"([A-J])\. (.+)", correct.strip())
    letter, text = (m.group(1), m.group(2)) if m else (None, correct.strip())
    said_letter, named = _answer_line(response)
    if said_letter is not None and letter is not None:
        return "correct" if said_letter == letter else "incorrect"
    if named is None:
        return "incorrect"
    return "correct" if _named_matches(named, text) else "incorrect"


def step_answer(text: str, request: dict[str, Any], seed: str) -> str | None:
    """The reply to a pilot step request, or None when ``text`` is not one (module docstring)."""
    question = _block(text, "Question to screen:")
    if question is not None:
        return json.dumps(screen(question))
    vignette = _block(text, "Vignette to split:")
    if vignette is not None:
        return json.dumps(split(vignette))
    vignette = _block(text, "Vignette to rewrite in the first person:")
    if vignette is not None:
        return rewrite(vignette)
    response = _block(text, "Response to map to an option:")
    if response is not None:
        return str(map_option(_block(text, "Options:") or "", response))
    response = _block(text, "Response to judge:")
    if response is not None:
        correct = _block(text, "Correct answer:") or ""
        attempt = str(request.get("attempt", ""))
        if _unit("judge-unparseable", seed, attempt, canonical_json(request).decode()) < 0.02:
            return "I cannot tell."
        return judge(correct, response)
    return None
