"""The simulated model on text requests: the reader, prompt features, reply forms and parsers."""

from __future__ import annotations

import ast
import asyncio
import base64
import builtins
import hashlib
import io
import json
import math
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from locations import REPO
from PIL import Image

import runner.simulated._knowledge as simulated_knowledge
import runner.simulated._text as simulated_text
import runner.simulated._vision as simulated
from analysis._parse import ParserConfig, parse_exact, parse_multiple_choice, parse_yes_no_maybe
from ledger import canonical_json
from runner._backends import SimulatedBackend
from runner.simulated._text import (
    TEXT_PARAMS_VERSION,
    SimulatedTextModel,
    TextParams,
    evaluate_arithmetic,
    model_base,
    read_prompt,
)
from runner.simulated._vision import SimParams, SimulatedModel

MODEL = "claude-sonnet-4-6"
N_ITEMS = 200
INSTRUCTION = "Answer with the letter of the correct option."
COT = "Think step by step before answering."
SYSTEM = "You are a careful clinician taking a written examination."


def request(
    text: str,
    *,
    system: str | list[dict[str, str]] | None = None,
    turns: tuple[tuple[str, str], ...] = (),
    model: str = MODEL,
    temperature: Any = 0,
    **extra: Any,
) -> dict[str, Any]:
    """A Messages request as docs/prompts.md §6 renders it: example turns, then the item."""
    messages: list[dict[str, Any]] = []
    for user, assistant in turns:
        messages.append({"role": "user", "content": [{"type": "text", "text": user}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": assistant}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    body: dict[str, Any] = {
        "max_tokens": 256,
        "messages": messages,
        "model": model,
        "temperature": temperature,
        **extra,
    }
    if system is not None:
        body["system"] = system
    return body


def text_of(response: dict[str, Any]) -> str:
    return "".join(b["text"] for b in response["content"] if b["type"] == "text")


def reply(req: dict[str, Any], seed: str = "s", params: TextParams | None = None) -> str:
    return text_of(SimulatedModel(text_params=params).respond(req, seed))


# --------------------------------------------------------------------------- synthetic items


@cache
def vocabulary() -> tuple[str, ...]:
    """Distinct made-up words (no English word, so only the designed overlaps exist)."""
    rng = random.Random(15)
    syllables = ["ka", "lo", "mi", "ter", "vu", "zan", "pre", "dol", "qui", "ber", "nox", "fal"]
    found: dict[str, None] = {}
    while len(found) < 4000:  # 12**4 words to draw from
        found["".join(rng.choice(syllables) for _ in range(4))] = None
    return tuple(found)


@cache
def synthetic_items(seed: int, n: int) -> tuple[tuple[str, str], ...]:
    """``n`` (item text, answer letter) pairs: the question shares two words with the key only.

    The answer stays here, in the test; the request carries only the rendered item.
    """
    rng = random.Random(seed)
    words = list(vocabulary())
    rng.shuffle(words)
    items: list[tuple[str, str]] = []
    for i in range(n):
        pick = [words.pop() for _ in range(10)]
        question = f"Which finding links {pick[0]} with {pick[1]} and {pick[2]}?"
        key = f"{pick[0]} with {pick[1]} {pick[3]}"
        distractors = [" ".join(pick[4 + 2 * j : 6 + 2 * j]) for j in range(3)]
        answer = "ABCD"[i % 4]
        texts = distractors[:]
        texts.insert(i % 4, key)
        options = "\n".join(f"{label}. {t}" for label, t in zip("ABCD", texts, strict=True))
        items.append((f"Question: {question}\n{options}\n\n{INSTRUCTION}", answer))
    return tuple(items)


def examples(count: int) -> tuple[tuple[str, str], ...]:
    """Few-shot examples as turns: the item text and ``Answer: X``."""
    return tuple((text, f"Answer: {answer}") for text, answer in synthetic_items(7, count))


ARMS: dict[str, dict[str, Any]] = {
    "plain": {},
    "system": {"system": SYSTEM},
    "fewshot-3": {"turns": examples(3)},
    "cot": {"cot": True},
}


def arm_request(arm: str, item: str, model: str = MODEL) -> dict[str, Any]:
    options = dict(ARMS[arm])
    text = item + ("\n" + COT if options.pop("cot", False) else "")
    return request(text, model=model, **options)


def run_arm(arm: str, model: str = MODEL, mode: str = "exactly-one") -> dict[str, float]:
    """Accuracy, expected accuracy and unparseable share of one arm over the synthetic items."""
    sim = SimulatedModel()
    config = ParserConfig("multiple-choice", "ABCD", mode)
    correct = unparseable = 0
    expected = 0.0
    for text, answer in synthetic_items(1, N_ITEMS):
        req = arm_request(arm, text, model)
        parsed = config.parse(text_of(sim.respond(req, f"{arm}|{text[:20]}|1")))
        correct += parsed.answer == answer
        unparseable += parsed.status == "unparseable"
        # the model's own letter distribution: the reader's answer less slips, plus the share
        # of position capture that lands on the key when the key is the first option
        shares = dict(sim.text.letter_distribution(req))
        expected += shares[answer] * (1.0 - sim.text.params.unparseable)
    return {
        "accuracy": correct / N_ITEMS,
        "expected": expected / N_ITEMS,
        "unparseable": unparseable / N_ITEMS,
    }


# --------------------------------------------------------------------------- basics


def test_response_shape_and_labels() -> None:
    text, _ = synthetic_items(1, 1)[0]
    req = request(text)
    seed = "study|plain|item-1|1"
    response = SimulatedModel().respond(req, seed)
    digest = hashlib.sha256(seed.encode() + canonical_json(req)).hexdigest()
    assert response["id"] == f"msg_sim_{digest[:24]}"
    assert response["type"] == "message" and response["role"] == "assistant"
    assert response["model"] == f"simulated/{MODEL}"
    assert response["stop_reason"] == "end_turn" and response["stop_sequence"] is None
    assert [b["type"] for b in response["content"]] == ["text"]
    assert response["usage"] == {
        "input_tokens": len(text) // 4,
        "output_tokens": max(1, len(text_of(response)) // 4),
    }
    with_system = SimulatedModel().respond(request(text, system=SYSTEM), seed)
    assert with_system["usage"]["input_tokens"] == (len(SYSTEM) + len(text)) // 4
    json.dumps(response)
    assert TextParams().as_dict()["version"] == TEXT_PARAMS_VERSION
    # through the backend: a Messages reply, labelled simulated
    backend = SimulatedBackend()
    sent = asyncio.run(backend.send(req, seed=seed))
    assert backend.simulated is True
    assert sent.model == f"simulated/{MODEL}" and sent.stop_reason == "end_turn"
    assert json.loads(sent.raw) == response
    assert asyncio.run(backend.count_tokens(req)) == len(text) // 4


def test_same_request_and_seed_same_bytes() -> None:
    text, _ = synthetic_items(1, 2)[1]
    for temperature in (0, 0.7, 1.0):
        req = request(text + "\n" + COT, system=SYSTEM, temperature=temperature)
        first = json.dumps(SimulatedModel().respond(req, "seed-1"), sort_keys=True)
        assert json.dumps(SimulatedModel().respond(req, "seed-1"), sort_keys=True) == first


def test_temperature_zero_replicates_identical_and_above_zero_they_vary() -> None:
    sim = SimulatedModel()
    items = synthetic_items(1, 40)
    for text, _ in items:
        cold = request(text, temperature=0)
        assert len({text_of(sim.respond(cold, f"rep-{r}")) for r in range(6)}) == 1
        greedy = request(text, temperature=1.0, top_k=1)  # top_k 1 is greedy too
        assert len({text_of(sim.respond(greedy, f"rep-{r}")) for r in range(6)}) == 1
    varied = 0
    for text, _ in items:
        warm = request(text, temperature=1.0, top_p=0.9, top_k=40)
        varied += len({text_of(sim.respond(warm, f"rep-{r}")) for r in range(6)}) > 1
    assert varied > len(items) // 2
    # temperature raises the slip probability by the documented term
    text = items[0][0]
    p = sim.text.params
    cold_logit = _logit(sim.text.slip_probability(request(text, temperature=0)))
    warm_logit = _logit(sim.text.slip_probability(request(text, temperature=0.8)))
    assert warm_logit - cold_logit == pytest.approx(p.weight_temperature * 0.8)
    half = _logit(sim.text.slip_probability(request(text, temperature=0.8, top_p=0.5)))
    assert half - cold_logit == pytest.approx(p.weight_temperature * 0.4)


def _logit(probability: float) -> float:
    return math.log(probability / (1.0 - probability))


def test_sampling_parameters_are_accepted_and_applied() -> None:
    text, _ = synthetic_items(1, 3)[2]
    quiet = TextParams(noise=False)
    req = request(
        text + "\n" + COT,
        system=[{"type": "text", "text": SYSTEM}],
        temperature=0.5,
        top_p=0.95,
        top_k=50,
        stop_sequences=["\n"],
    )
    response = SimulatedModel(text_params=quiet).respond(req, "s")
    # the reasoning line is cut at the stop sequence, as a real model stops there
    assert response["stop_reason"] == "stop_sequence" and response["stop_sequence"] == "\n"
    assert "\n" not in text_of(response) and text_of(response)
    assert read_prompt(req).has_system
    short = request(text + "\n" + COT, max_tokens=5)
    cut = SimulatedModel(text_params=quiet).respond(short, "s")
    assert cut["stop_reason"] == "max_tokens" and len(text_of(cut)) == 20
    odd = request(text, temperature="hot", top_p=None, top_k=True, stop_sequences="x")
    assert SimulatedModel().respond(odd, "s")["stop_reason"] == "end_turn"  # ignored, no error


# --------------------------------------------------------------------------- the reader


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("What is 7 plus 5?", 12),
        ("Compute 12 - 20.", -8),
        ("How much is 6 times 7 minus 2?", 40),
        ("What is 2 + 3 * 4?", 14),
        ("What is 3*3*3 plus 1?", 28),
        ("How many days are in a week?", None),
        ("Give 1.5 + 2.", None),  # not integers
    ],
)
def test_arithmetic_is_computed(question: str, value: int | None) -> None:
    assert evaluate_arithmetic(question) == value


def test_arithmetic_questions_are_solved() -> None:
    quiet = TextParams(noise=False)
    cases = [
        ("What is 7 plus 5?", ["10", "11", "12", "13"], "C"),
        ("What is 2 + 3 * 4?", ["20", "14", "9", "24"], "B"),
        ("How much is 6 times 7 minus 2?", ["40.", "42", "44", "38"], "A"),
        ("What is 1000 times 3?", ["300", "30", "3000", "3,000"], "C"),
        ("What is 15 minus 20?", ["5", "-5", "35", "0"], "B"),
    ]
    for question, options, answer in cases:
        lines = [f"{label}) {o}" for label, o in zip("ABCD", options, strict=True)]
        text = question + "\n" + "\n".join(lines) + "\n"
        req = request(text)
        assert SimulatedTextModel(quiet).reader_answer(req) == answer, question
        assert reply(req, params=quiet) == answer
        assert parse_multiple_choice(reply(request(text + COT), params=quiet)).answer == answer
    free = request("What is 9 times 9? Reply with the number only.")
    assert reply(free, params=quiet) == "81"


def test_overlap_reader_chooses_the_overlapping_option() -> None:
    quiet = SimulatedTextModel(TextParams(noise=False))
    for text, answer in synthetic_items(1, N_ITEMS):
        assert quiet.reader_answer(request(text)) == answer
    # the context paragraph counts too; option labels (A. (B) C) D:) are all read
    text = (
        "Context: The patient has polyuria, polydipsia and a raised fasting glucose.\n"
        "Question: Which diagnosis fits best?\n"
        "A: Asthma with wheeze\n(B) Diabetes mellitus with raised glucose\n"
        "C) Migraine\nD. Gout in the toe\n"
    )
    prompt = read_prompt(request(text))
    assert [label for label, _ in prompt.options] == ["A", "B", "C", "D"]
    assert prompt.question == "Which diagnosis fits best?"
    assert prompt.context == ("The patient has polyuria, polydipsia and a raised fasting glucose.",)
    assert quiet.reader_answer(request(text)) == "B"


def test_ties_are_broken_by_a_hash_of_the_item() -> None:
    quiet = SimulatedTextModel(TextParams(noise=False))
    chosen = []
    for i in range(40):
        text = f"Item {i}: which one?\nA. alpha\nB. beta\nC. gamma\nD. delta\n"
        first = quiet.reader_answer(request(text))
        assert quiet.reader_answer(request(text, system=SYSTEM)) == first  # the item decides
        chosen.append(first)
    assert len(set(chosen)) == 4  # not always the first option


# --------------------------------------------------------------------------- features


@cache
def arm_results() -> dict[str, dict[str, float]]:
    return {arm: run_arm(arm) for arm in ARMS}


def test_features_raise_accuracy_in_the_documented_direction() -> None:
    results = arm_results()
    p = TextParams()
    assert p.weight_system > 0 and p.weight_shot > 0 and p.weight_cot > 0
    plain = results["plain"]
    for arm, stats in results.items():
        # the observed accuracy is the documented one, within 4 standard errors
        se = math.sqrt(stats["expected"] * (1 - stats["expected"]) / N_ITEMS)
        assert abs(stats["accuracy"] - stats["expected"]) < 4 * se, (arm, stats)
        if arm != "plain":
            assert stats["expected"] > plain["expected"], arm
            assert stats["accuracy"] > plain["accuracy"], (arm, results)
    # every pair of arms whose expected accuracies differ by more than 3 standard errors of
    # the difference is observed in that order (expected values computed, not written down)
    for a in results:
        for b in results:
            ea, eb = results[a]["expected"], results[b]["expected"]
            se = math.sqrt((ea * (1 - ea) + eb * (1 - eb)) / N_ITEMS)
            if ea - eb > 3 * se:
                assert results[a]["accuracy"] > results[b]["accuracy"], (a, b, results)
    print({arm: round(stats["accuracy"], 3) for arm, stats in results.items()})


def test_few_shot_examples_count_as_turns_or_inline_answers() -> None:
    text, _ = synthetic_items(1, 1)[0]
    assert read_prompt(request(text)).shots == 0
    assert read_prompt(request(text, turns=examples(3))).shots == 3
    inline = "\n\n".join(f"{t}\nAnswer: {a}" for t, a in synthetic_items(7, 2))
    prompt = read_prompt(request(inline + "\n\n" + text))
    assert prompt.shots == 2
    assert prompt.examples == ("Answer: A", "Answer: B")
    assert prompt.question == read_prompt(request(text)).question
    assert prompt.options == read_prompt(request(text)).options
    bare = "\n\n".join(f"{t}\n{a}" for t, a in synthetic_items(7, 3))  # answer template {answer}
    prompt = read_prompt(request(bare + "\n\n" + text))
    assert prompt.examples == ("A", "B", "C")
    assert prompt.question == read_prompt(request(text)).question
    assert prompt.options == read_prompt(request(text)).options
    sim = SimulatedTextModel()
    with_two = sim.slip_probability(request(inline + "\n\n" + text))
    assert with_two < sim.slip_probability(request(text))
    quiet = TextParams(noise=False)
    answer = synthetic_items(1, 1)[0][1]
    assert reply(request(inline + "\n\n" + text), params=quiet) == f"Answer: {answer}"
    assert reply(request(bare + "\n\n" + text), params=quiet) == answer


def test_two_model_ids_differ() -> None:
    other = "claude-haiku-4-5"
    assert model_base(MODEL) != model_base(other)
    assert model_base(MODEL) == model_base(MODEL)
    p = TextParams()
    for name in (MODEL, other, "", "x" * 300):
        assert p.base_center - p.base_spread <= model_base(name) <= p.base_center + p.base_spread
    mine, theirs = run_arm("plain", MODEL), run_arm("plain", other)
    better = MODEL if model_base(MODEL) < model_base(other) else other
    assert (mine["expected"] > theirs["expected"]) == (better == MODEL)
    assert (mine["accuracy"] > theirs["accuracy"]) == (better == MODEL)
    texts = {
        name: [reply(request(t, model=name)) for t, _ in synthetic_items(1, 30)]
        for name in (MODEL, other)
    }
    assert texts[MODEL] != texts[other]


# --------------------------------------------------------------------------- reply forms


def both_modes(text: str) -> tuple[str | None, str | None]:
    return (
        parse_multiple_choice(text, "ABCD").answer,
        parse_multiple_choice(text, "ABCD", mode="first-token").answer,
    )


def test_chain_of_thought_reply_parses_to_the_chosen_letter() -> None:
    quiet = TextParams(noise=False)
    for text, answer in synthetic_items(1, 40):
        out = reply(request(text + "\n" + COT), params=quiet)
        reasoning, _, last = out.rpartition("\n")
        assert last == f"Answer: {answer}"
        assert reasoning.count(". ") == 1 and reasoning.endswith(".")  # two sentences
        assert both_modes(out) == (answer, answer)


@pytest.mark.parametrize(
    ("example_answer", "form"),
    [
        ("Answer: {L}", "Answer: {L}"),
        ("{L}", "{L}"),
        ("({L})", "({L})"),
        ("{L}.", "{L}."),
        ("{L}. {T}", "{L}. {T}"),
        ("The answer is {L}.", "The answer is {L}."),
        ("Reasoning about it first.\nAnswer: {L}", "\nAnswer: {L}"),
    ],
)
def test_few_shot_replies_copy_the_examples_form(example_answer: str, form: str) -> None:
    quiet = TextParams(noise=False)
    shots = tuple(
        (t, example_answer.format(L=a, T=dict(_options(t))[a])) for t, a in synthetic_items(7, 2)
    )
    for text, answer in synthetic_items(1, 20):
        out = reply(request(text, turns=shots), params=quiet)
        expected = form.format(L=answer, T=dict(_options(text))[answer])
        assert out.endswith(expected) if form.startswith("\n") else out == expected
        assert both_modes(out) == (answer, answer), out


def _options(text: str) -> list[tuple[str, str]]:
    return [(line[0], line[3:]) for line in text.split("\n") if line[1:3] == ". "]


def test_noisy_replies_parse_alike_in_both_modes_except_the_unparseable_share() -> None:
    sim = SimulatedModel()
    p = sim.text.params
    n = 0
    two_labels = no_label = 0
    for arm in ARMS:
        for text, _ in synthetic_items(1, N_ITEMS):
            out = text_of(sim.respond(arm_request(arm, text), f"{arm}|{text[:24]}"))
            exact, first = both_modes(out)
            n += 1
            if exact is not None:
                assert first == exact, out
            elif first is not None:
                two_labels += 1
                assert out.startswith(f"Answer: {first} or ")
            else:
                no_label += 1
    share = (two_labels + no_label) / n
    se = math.sqrt(p.unparseable * (1 - p.unparseable) / n)
    assert abs(share - p.unparseable) < 4 * se
    assert two_labels > 0 and no_label > 0
    none = TextParams(unparseable=0.0)
    for text, _ in synthetic_items(1, 50):
        assert parse_multiple_choice(reply(request(text), params=none)).status == "ok"


# --------------------------------------------------------------------------- yes / no / maybe

YNM_CASES = [
    ("Aspirin reduced the risk of stroke in older adults.", "yes"),
    ("Aspirin did not reduce the risk of stroke in older adults.", "no"),
    ("Stroke risk in older adults was unchanged without aspirin.", "no"),
    ("Aspirin didn't lower stroke risk; adults older than 70 never benefited.", "no"),
    ("Statins were studied in children with asthma.", "maybe"),
    ("The aspirin group was small.", "maybe"),
]


@pytest.mark.parametrize(("context", "answer"), YNM_CASES)
def test_yes_no_maybe_from_the_context(context: str, answer: str) -> None:
    text = (
        f"Context: {context}\n"
        "Question: Does aspirin reduce stroke risk in older adults?\n"
        "Answer yes, no or maybe."
    )
    quiet = TextParams(noise=False)
    prompt = read_prompt(request(text))
    assert prompt.kind == "yes-no-maybe"
    assert prompt.question == "Does aspirin reduce stroke risk in older adults?"
    assert SimulatedTextModel(quiet).reader_answer(request(text)) == answer
    assert reply(request(text), params=quiet) == answer
    for form in ("exactly-one", "first-token"):
        out = reply(request(text + " " + COT), params=quiet)
        assert out.endswith(f"\nAnswer: {answer}")
        assert parse_yes_no_maybe(out, mode=form).answer == answer
    shots = (("Context: x.\nQuestion: y?\nAnswer yes, no or maybe.", "Yes."),)
    out = reply(request(text, turns=shots), params=quiet)
    assert out == answer.capitalize() + "."
    assert parse_yes_no_maybe(out).answer == answer


def test_yes_no_maybe_noisy_replies_stay_in_the_vocabulary() -> None:
    sim = SimulatedModel()
    said = set()
    for i in range(120):
        context, _ = YNM_CASES[i % len(YNM_CASES)]
        text = f"Context: {context} Case {i}.\nQuestion: Does aspirin reduce stroke risk?\n"
        out = text_of(sim.respond(request(text + "Answer yes, no or maybe."), f"y{i}"))
        first = parse_yes_no_maybe(out, mode="first-token").answer
        exact = parse_yes_no_maybe(out).answer
        assert exact is None or first == exact
        said.add(exact)
    assert {"yes", "no", "maybe"} <= said


# --------------------------------------------------------------------------- free text


def test_free_text_answers_with_the_overlapping_sentence() -> None:
    quiet = TextParams(noise=False)
    text = (
        "Context: Paris is the capital of France. Lyon is a large French city with old "
        "silk workshops. The capital city of France has many museums and bridges.\n"
        "Question: What is the capital of France?"
    )
    prompt = read_prompt(request(text))
    assert prompt.kind == "free-text"
    expected = "The capital city of France has many museums and bridges."  # longest overlapping
    assert reply(request(text), params=quiet) == expected
    assert parse_exact(reply(request(text), params=quiet)).answer == expected
    assert (
        reply(request("Context: Paris is the capital.\nAnswer: Paris\n\n" + text), params=quiet)
        == f"Answer: {expected}"
    )
    lone = request("Name the largest planet of the solar system.")
    word = reply(lone, params=quiet)
    assert word in {"name", "largest", "planet", "solar", "system"}
    assert reply(lone, params=quiet) == word
    empty = TextParams(unparseable=1.0)
    assert reply(lone, params=empty) == ""


# --------------------------------------------------------------------------- images and answers


def test_image_requests_are_answered_as_before() -> None:
    """The vision path: pixels decide; a text-only tumbling-E prompt sees no chart, as before."""
    image = Image.new("L", (100, 100), 255)
    image.paste(0, (70, 30, 95, 70))  # ink on the right
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    letters = "Which way?\nA. UP\nB. DOWN\nC. RIGHT\nD. LEFT\n"
    req = {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": data},
                    },
                    {"type": "text", "text": letters},
                ],
            }
        ],
    }
    model = SimulatedModel(SimParams(noise=False))
    assert text_of(model.respond(req, "s")) == "C"  # from the pixels, not the text
    assert model.respond(req, "s")["usage"]["input_tokens"] == len(letters) // 4 + 1600
    schema = 'Answer with one JSON object: {"chart_type": ...}'
    out = text_of(model.respond(request(schema), "s"))
    assert json.loads(out) == {"chart_type": "other", "rows": []}


def test_image_answers_are_pinned() -> None:
    """Responses to image requests, hashed: the bytes of ``prompt-sim-4``.

    Text requests never move them; a new simulated model version does (``prompt-sim-4`` gave
    orientation words Experiment 2's phenotype) and re-pins them.
    """
    image = Image.new("L", (120, 90), 255)
    image.paste(0, (20, 5, 60, 30))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    prompts = [
        "Which way?\nA. UP\nB. RIGHT\n(C) DOWN\nD) LEFT\n",
        "Is it a tumbling-E chart? Yes, no or maybe?",
        "Answer with one word: UP, RIGHT, DOWN or LEFT.",
        "Look at the eye chart in the image and report what you see.",
    ]
    digest = hashlib.sha256()
    model = SimulatedModel()
    for prompt in prompts:
        req = {
            "model": MODEL,
            "max_tokens": 64,
            "temperature": 1.0,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": data},
                        },
                        {"type": "text", "text": prompt},
                    ],
                }
            ],
        }
        for rep in range(25):
            digest.update(canonical_json(model.respond(req, f"pin|{rep}")))
    assert digest.hexdigest() == IMAGE_PIN


IMAGE_PIN = "e4a6ce528ae638f1005059fbd9bd356731e82a92436dc3b2fdc2688a62f4548d"
"""Computed with ``runner/simulated/_vision.py`` of commit 184c475, before text requests existed."""


def test_the_text_reader_never_sees_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Structurally: no truth, item or stimulus module and no file; at run time: no open."""
    allowed = {
        "__future__",
        "hashlib",
        "math",
        "re",
        "dataclasses",
        "typing",
        "numpy",
        "ledger",
        "runner.simulated._knowledge",
    }
    tree = ast.parse(Path(simulated_text.__file__).read_text(encoding="utf-8"))
    # the background knowledge is data only: no import but __future__, no call, only strings
    knowledge = ast.parse(Path(simulated_knowledge.__file__).read_text(encoding="utf-8"))
    assert {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(knowledge)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    } == {"__future__"}
    assert not [n for n in ast.walk(knowledge) if isinstance(n, ast.Call)]
    assert all(isinstance(s, str) for s in simulated_knowledge.KNOWLEDGE)
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= allowed, imported - allowed
    called = {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    forbidden = {
        "open",
        "read_text",
        "read_bytes",
        "Path",
        "load",
        "loads",
        "__import__",
        "import_module",
        "exec",
        "eval",
        "getattr",
        "read_truth_csv",
    }
    assert not called & forbidden, called & forbidden
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"open", "__builtins__", "globals", "sys", "os", "io"}
    # the vision module opens only in-memory images and imports no truth or items
    vision = ast.parse(Path(simulated.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(vision):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
                assert not any(w in name for w in ("truth", "items", "stimuli")), name
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "open":
            assert ast.unparse(node).startswith("Image.open(io.BytesIO("), ast.unparse(node)
        assert not (isinstance(node, ast.Name) and node.id == "open")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulated model opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(io, "open", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "open", refuse)
    for text, answer in synthetic_items(1, 20):
        out = text_of(
            SimulatedModel(text_params=TextParams(noise=False)).respond(request(text), "s")
        )
        assert out == answer


def test_the_docs_numbers_are_the_models() -> None:
    """docs/simulated.md §2.3: the formula's weights and the worked example, recomputed."""
    path = REPO / "docs" / "simulated.md"
    doc = " ".join(path.read_text(encoding="utf-8").split())
    p = TextParams()
    assert (
        f"sigmoid(base(model) - {p.weight_system}*[system prompt] - {p.weight_shot}*examples - "
        f"{p.weight_cot}*[step by step] + {p.weight_temperature}*T)"
    ) in doc
    assert f"base(model) = {p.base_center} + {p.base_spread} * (2u - 1)" in doc

    def pct(logit: float) -> str:
        return f"{round(100 / (1 + math.exp(-logit)))} %"

    low, high = p.base_center - p.base_spread, p.base_center + p.base_spread
    assert f"between a slip rate of {pct(low)} and {pct(high)}" in doc
    base = model_base(MODEL)
    assert (
        f"`{MODEL}` has base {base:.3f}: a bare prompt slips {pct(base)} of the time, with a "
        f"system prompt {pct(base - p.weight_system)}, with three examples "
        f"{pct(base - 3 * p.weight_shot)}, asked to think step by step {pct(base - p.weight_cot)}"
    ) in doc
    assert f"With probability `unparseable` ({round(100 * p.unparseable)} %)" in doc
    sim = SimulatedTextModel()
    text, _ = synthetic_items(1, 1)[0]
    assert sim.slip_probability(request(text)) == pytest.approx(1 / (1 + math.exp(-base)))
