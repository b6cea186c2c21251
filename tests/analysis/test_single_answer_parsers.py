"""Single-answer parsing and scoring: modes, exact and normalized text, the documented cases.

Both implementations are checked, the reference (``analysis._parse`` / ``analysis._score``) and
the verifier's own (``verify._rescore``, written from ``docs/scoring.md``), against the page's
tables and against each other on random texts.
"""

from __future__ import annotations

import base64
import builtins
import io
import random
import re
from typing import Any

import pytest
from locations import REPO
from PIL import Image

from analysis._parse import (
    PARSERS,
    ParserConfig,
    normalize_text,
    parse_exact,
    parse_multiple_choice,
    parse_normalized,
    parse_orientation_word,
    parse_response,
    parse_yes_no_maybe,
)
from analysis._score import score_choice, score_text
from runner.simulated._vision import SimParams, SimulatedModel, answer_format, image_direction
from verify import _parsers as vp
from verify import _rescore as rs

DOC = REPO / "docs" / "scoring.md"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.index("\n#", start + len(title))
    return text[start:end]


def choice_table() -> list[tuple[str, str | None, str | None]]:
    """(reply, exactly-one answer, first-token answer) from the table of section 5.4."""
    rows = []
    for line in section("### 5.4").splitlines():
        match = re.fullmatch(r"\| `(.*)` \| (.*?) \| (.*?) \|", line)
        if match is None or match.group(1) == "reply":
            continue
        reply = match.group(1).replace("\\n", "\n")
        answers = [None if cell.startswith("unparseable") else cell for cell in match.groups()[1:]]
        rows.append((reply, answers[0], answers[1]))
    return rows


def test_the_documented_table_has_every_case() -> None:
    rows = choice_table()
    assert len(rows) == 18
    assert ("A or B", None, "A") in rows
    assert ("Answer: B or C", None, "B") in rows


@pytest.mark.parametrize(("reply", "exactly_one", "first_token"), choice_table())
def test_multiple_choice_reads_the_documented_table(
    reply: str, exactly_one: str | None, first_token: str | None
) -> None:
    for mode, expected in (("exactly-one", exactly_one), ("first-token", first_token)):
        parsed = parse_multiple_choice(reply, mode=mode)
        assert parsed.answer == expected, (mode, reply)
        assert parsed.status == ("ok" if expected else "unparseable")
        mine = vp.parse_text(reply, "multiple-choice", "ABCD", mode)
        assert mine.status == parsed.status
        assert mine.answers == (((1, (expected,)),) if expected else ())


@pytest.mark.parametrize(
    ("parser", "text", "exactly_one", "first_token"),
    [
        ("yes-no-maybe", "No evidence supports yes.", None, "no"),
        ("yes-no-maybe", "Maybe, but the answer is no.", "no", "maybe"),
        ("yes-no-maybe", "The answer is yes or no.", None, "yes"),
        ("orientation-word", "up or down? The answer is LEFT", "LEFT", "up".upper()),
        ("orientation-word", "It points nowhere.", None, None),
        ("yes-no-maybe", "", None, None),
    ],
)
def test_first_token_mode_of_the_word_parsers(
    parser: str, text: str, exactly_one: str | None, first_token: str | None
) -> None:
    function = parse_yes_no_maybe if parser == "yes-no-maybe" else parse_orientation_word
    for mode, expected in (("exactly-one", exactly_one), ("first-token", first_token)):
        assert function(text, mode=mode).answer == expected, (mode, text)
        assert ParserConfig(parser, mode=mode).parse(text).answer == expected
        mine = vp.parse_text(text, parser, mode=mode)
        assert (mine.answers[0][1][0] if mine.answers else None) == expected


def test_modes_and_parsers_are_checked() -> None:
    with pytest.raises(ValueError, match="mode must be one of exactly-one, first-token"):
        parse_yes_no_maybe("yes", mode="first")
    with pytest.raises(ValueError, match="parser 'exact' has only the mode exactly-one"):
        ParserConfig("exact", mode="first-token").check()
    with pytest.raises(KeyError, match="unknown parser 'free-text'"):
        parse_response(b"{}", "anthropic-messages", ParserConfig("free-text"))
    with pytest.raises(ValueError, match="letters must be 2-26 distinct"):
        vp.parse_text("A", "multiple-choice", "AAB")
    with pytest.raises(ValueError, match="has no mode"):
        vp.parse_text("A", "normalized", mode="first-token")


# ------------------------------------------------------------------------------ text parsers


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("**Myocardial infarction.**", "myocardial infarction"),
        ("It\u2019s 3.5 mg!", "it s 3 5 mg"),
        ("M\u00e9ni\u00e8re  DISEASE", "m\u00e9ni\u00e8re disease"),
        ("  Answer:\r\n\t`LEFT` ", "answer left"),
        ("a_b-c/d", "a b c d"),
        ("\u2013\u2014...", ""),
    ],
)
def test_normalization_is_the_documented_one(text: str, normalized: str) -> None:
    assert normalize_text(text) == normalized == rs.normalized(text)
    parsed = parse_normalized(text)
    assert parsed.answer == (normalized or None)
    assert parsed.status == ("ok" if normalized else "unparseable")


def test_the_documented_normalization_examples() -> None:
    doc = section("### 5.3")
    examples = (
        ("**Myocardial infarction.**", "myocardial infarction"),
        ("It\u2019s 3.5 mg!", "it s 3 5 mg"),
        ("M\u00e9ni\u00e8re  DISEASE", "m\u00e9ni\u00e8re disease"),
    )
    for source, result in examples:
        assert f"`{source}` gives `{result}`" in doc.replace("\n  ", " ")
        assert normalize_text(source) == result
    punctuation = re.search(r"``(.*?)``\) replaced", doc, re.S)
    assert punctuation is not None and len(punctuation.group(1)) == 32
    assert normalize_text("x" + punctuation.group(1) + "y") == "x y"


@pytest.mark.parametrize(
    ("parser", "text", "truth", "answer", "correct"),
    [
        ("exact", "  LEFT\n", "LEFT", "LEFT", True),
        ("exact", "left", "LEFT", "left", False),
        ("exact", "**LEFT**", "LEFT", "**LEFT**", False),
        ("exact", " \n", "LEFT", None, False),
        ("normalized", "**Left.**", "LEFT", "left", True),
        ("normalized", "The answer: left", "LEFT", "the answer left", False),
        (
            "normalized",
            "Myocardial  infarction",
            "myocardial infarction.",
            "myocardial infarction",
            True,
        ),
        ("multiple-choice", "Answer: b", " B ", "B", True),
        ("yes-no-maybe", "Yes.", "YES", "yes", True),
    ],
)
def test_single_answers_are_scored_as_documented(
    parser: str, text: str, truth: str, answer: str | None, correct: bool
) -> None:
    score = score_text(text, parser, truth)
    item = score.items[0].as_dict()
    assert item == {
        "row": None,
        "position": None,
        "truth": truth,
        "answer": answer,
        "answered": answer is not None,
        "correct": correct,
    }
    assert score.status == ("ok" if answer is not None else "unparseable")
    assert score == score_choice(PARSERS[parser](text), truth, parser)
    mine = vp.score(vp.parse_text(text, parser), parser, truth)
    assert (mine.status, mine.n_correct, mine.sha256) == (score.status, int(correct), score.sha256)
    assert mine.items == score.items_bytes()


def test_exact_keeps_the_text_and_only_strips_whitespace() -> None:
    assert parse_exact("\t Hypertension, stage 2 \n").answer == "Hypertension, stage 2"
    assert parse_exact("").status == "unparseable"


def test_the_verifier_agrees_on_random_texts_for_every_parser_and_mode() -> None:
    seeds = [
        "Answer: B or C",
        "(c)",
        "A 45-year-old man. Answer: D",
        "No, the trial did not.",
        "maybe yes",
        "the top points LEFT",
        "UP or DOWN",
        "**Final answer: (E)**",
        "  Myocardial infarction.  ",
        "It\u2019s \u2013 3.5",
        "",
        "b\n",
        "I think C is right",
    ]
    alphabet = [*"ABCDEabcde ()[].:,*`\n\u2019\u2013", "answer is ", "yes", "no", "LEFT", "up"]
    rng = random.Random(15)
    configs = [
        (parser, letters, mode)
        for parser in PARSERS
        if parser
        not in ("tumbling-e-json", "cloze")  # cloze reads bodies: tests/analysis/test_cloze.py
        for letters in ("ABCD", "ABCDE")
        for mode in ("exactly-one", "first-token")
        if (parser == "multiple-choice" or letters == "ABCD")
        and (
            mode == "exactly-one"
            or parser in ("multiple-choice", "yes-no-maybe", "orientation-word")
        )
    ]
    assert len(configs) == 10
    for _ in range(800):
        text = rng.choice(seeds)
        for _ in range(rng.randint(0, 3)):
            k = rng.randrange(len(text) + 1)
            text = text[:k] + rng.choice(alphabet) + text[k + 1 :]
        for parser, letters, mode in configs:
            ref = ParserConfig(parser, letters, mode).parse(text)
            mine = vp.parse_text(text, parser, letters, mode)
            assert mine.status == ref.status, (parser, letters, mode, text)
            assert mine.answers == tuple((a.row, tuple(a.values)) for a in ref.answers)


# ------------------------------------------------------------------------------ simulated


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def request(image: bytes, text: str) -> dict[str, Any]:
    data = base64.b64encode(image).decode("ascii")
    source = {"type": "base64", "media_type": "image/png", "data": data}
    return {
        "model": "claude-sonnet-4-6",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": source},
                    {"type": "text", "text": text},
                ],
            }
        ],
    }


def text_of(response: dict[str, Any]) -> str:
    return str(response["content"][0]["text"])


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [
        ('Answer with one JSON object and nothing else: {"chart_type": ...}', "tumbling-e-json"),
        ("Which way?\nA. UP\nB. RIGHT\n(C) DOWN\nD) LEFT\n", "multiple-choice"),
        ("Is it a tumbling-E chart? Yes, no or maybe?", "yes-no-maybe"),
        ("Answer with one word: UP, RIGHT, DOWN or LEFT.", "orientation-word"),
        ("Answer in one word: up, right, down or left.", "tumbling-e-json"),  # not in capitals
        ("Look at the eye chart in the image and report what you see.", "tumbling-e-json"),
    ],
)
def test_the_simulated_model_answers_what_the_prompt_asks(prompt: str, kind: str) -> None:
    assert answer_format(prompt)[0] == kind


def test_the_direction_of_an_image_follows_its_rotation() -> None:
    upright = Image.new("L", (120, 90), 255)
    upright.paste(0, (20, 5, 60, 30))
    turned = {
        "UP": upright,
        "RIGHT": upright.transpose(Image.Transpose.ROTATE_270),
        "DOWN": upright.transpose(Image.Transpose.ROTATE_180),
        "LEFT": upright.transpose(Image.Transpose.ROTATE_90),
    }
    for direction, image in turned.items():
        assert image_direction(png(image)) == direction
    assert image_direction(png(Image.new("L", (10, 10), 255))) is None
    assert image_direction(b"not an image") is None


def test_noiseless_single_answers_come_from_the_pixels(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = builtins.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).lower().endswith(".csv"):
            raise AssertionError(f"the simulated model opened {file}")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    image = Image.new("L", (100, 100), 255)
    image.paste(0, (70, 30, 95, 70))  # ink on the right: the top points RIGHT
    model = SimulatedModel(SimParams(noise=False))
    word = "Which way does the top point? Answer with one word: UP, RIGHT, DOWN or LEFT."
    assert text_of(model.respond(request(png(image), word), "s")) == "RIGHT"
    letters = "Which way?\nA. UP\nB. DOWN\nC. RIGHT\nD. LEFT\n"
    assert text_of(model.respond(request(png(image), letters), "s")) == "C"
    ynm = "Is every symbol an E? Answer yes, no or maybe."
    assert text_of(model.respond(request(png(image), ynm), "s")) == "no"  # no E-shaped symbol


def test_noisy_single_answers_are_deterministic_and_mostly_right() -> None:
    image = Image.new("L", (100, 100), 255)
    image.paste(0, (30, 2, 70, 25))
    req = request(png(image), "Answer with one word: UP, RIGHT, DOWN or LEFT.")
    model = SimulatedModel()
    texts = [text_of(model.respond(req, f"t|{i}")) for i in range(200)]
    assert texts == [text_of(SimulatedModel().respond(req, f"t|{i}")) for i in range(200)]
    answers = [parse_orientation_word(t).answer for t in texts]
    assert answers.count("UP") > 100
    assert len(set(answers)) > 2  # errors and unparseable replies happen too
    assert {"UP", "Answer: UP", "The top of the image points UP."} <= set(texts)
