"""The differential conformance suite's generator, backend, pipeline and tampers (issue 31).

A *design* is a valid study written in the study language (``docs/study-spec.md``), drawn by a
seeded generator (:func:`generate`, ``random.Random(seed)``: the same seed always gives the same
study, byte for byte) from six families:

- ``mc``: text multiple choice (item file, item template, arms and roles with matched-control
  claims, a system prompt, few-shot turns, option-order variants, one model or several, identical
  models, temperature 0 or above, parser modes, every test a letter parser takes);
- ``text``: yes/no/maybe over abstracts, or open answers scored ``exact`` / ``normalized``;
- ``image``: images in four rotations scored by ``orientation-word`` (source random intercept);
- ``factorial``: an item-scope factor crossed with a prompt-scope factor (components or system
  prompt), with factorial main effects and interactions;
- ``judge``: open answers scored ``judge:<step>`` by one judge or two (a recorded trial step);
- ``phases``: a multiple-choice study locked in two phases before it runs.

Each design runs on :class:`MixBackend`, the simulated backend whose target replies are, per arm,
the simulation's own (``sim``) or an edge: every answer right (``correct``, a ceiling), every
answer wrong (``wrong``, a floor), every reply unparseable (``unparseable``), a seeded coin
(``coin``) or right with a fifth of the replies unparseable (``holes``: exclusions in paired
designs). Step calls (judges) are always the simulation's. The backend is labelled simulated, as
the simulation is; it reads the item's answer from the generator's oracle, which the simulated
model never does (``docs/simulated.md``), but nothing the verifier checks depends on who wrote a
reply.

:func:`run_design` drives lock -> run -> score -> unblind -> analyze -> export in process
through ``runner`` and ``analysis``'s public faces; :func:`verify_honest` and the table
:data:`TAMPERS` then check the archive with ``verify.verify_archive``. Every tamper is a careful
forger's: the archive is re-signed with the owner's own key (chain, signatures, checkpoints,
``export.created`` and the manifest consistent), so only the check that owns the content can
catch it, and the test asserts that check's name and a fragment of its message.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import SCIENCE_CHECKS, reanalysis_skipped, science_skipped

from ledger import SigningKey, canonical_json
from tests.verify.test_archive_tamper import read_events, resign
from verify import Report, Status, verify_archive

FAMILIES = ("mc", "text", "image", "factorial", "judge", "phases")
MIXES = ("sim", "correct", "wrong", "unparseable", "coin", "holes")

# ----------------------------------------------------------------------------------- the design


@dataclass
class Design:
    """One generated study: its files, the oracle of its answers and the response mix."""

    seed: int
    family: str
    files: dict[str, str] = field(default_factory=dict)
    phase_one: str | None = None  # phases: the first lock's study.toml (files["study.toml"] next)
    answers: dict[str, str] = field(default_factory=dict)  # stimulus -> the right reply text
    wrongs: dict[str, str] = field(default_factory=dict)  # stimulus -> a wrong reply text
    letters: bool = False  # replies are option letters looked up in the request
    mix: dict[str, str] = field(default_factory=dict)  # arm -> behaviour (default "sim")
    unparseable: str = "The options do not settle it from the text given."
    tags: set[str] = field(default_factory=set)
    image_sources: int = 0  # image family: sources drawn at write time
    draws: int = 2  # the generator's version of the draws (see GENERATOR_DRAWS)

    def describe(self) -> str:
        """One line naming the design, for failure messages and the soak's tally."""
        mix = ",".join(f"{a}={m}" for a, m in sorted(self.mix.items()) if m != "sim") or "sim"
        return f"seed {self.seed} [{self.family}] mix {mix} tags {sorted(self.tags)}"


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


WORDS = (
    "aspirin",
    "insulin",
    "heparin",
    "warfarin",
    "digoxin",
    "morphine",
    "atropine",
    "lithium",
    "thyroxine",
    "cortisol",
    "glucagon",
    "ferritin",
    "albumin",
    "keratin",
    "melanin",
    "pepsin",
)


def _mc_items(rng: random.Random, n: int, k: int) -> list[dict[str, Any]]:
    """``n`` multiple-choice items with ``k`` distinct options each (no two items alike)."""
    items = []
    for i in range(n):
        options = rng.sample(WORDS, k)
        key = rng.randrange(k)
        question = f"Case {i + 1}: which drug is named {options[key]} in the chart?"
        if rng.random() < 0.4:  # an item the simulated reader can only guess
            question = f"Case {i + 1}: which drug was given on day {i + 2}?"
        items.append(
            {
                "id": f"q{i + 1:02d}",
                "question": question,
                "options": options,
                "answer": "ABCDEF"[key],
            }
        )
    return items


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


# hypotheses ----------------------------------------------------------------------------------


def _hyp(hid: str, test: str, **keys: Any) -> str:
    lines = [
        "[[hypotheses]]",
        f'id = "{hid}"',
        f'description = "Generated {test} test."',
        f'test = "{test}"',
    ]
    for name, value in keys.items():
        if isinstance(value, list):
            lines.append(f"{name} = {_toml_list(value)}")
        elif isinstance(value, str):
            lines.append(f"{name} = {json.dumps(value)}")
        else:
            lines.append(f"{name} = {value}")
    return "\n".join(lines) + "\n"


def _pair_hypotheses(
    rng: random.Random, arms: list[str], tests: list[str], start: int = 1, count: int = 3
) -> list[str]:
    """Up to ``count`` hypotheses of ``tests`` on pairs of ``arms`` (every pair runs alike)."""
    out = []
    chosen = rng.sample(tests, min(count, len(tests)))
    for i, test in enumerate(chosen):
        a, b = rng.sample(arms, 2)
        hid = f"H{start + i}"
        if test == "equivalence":
            out.append(_hyp(hid, test, contrast=[a, b], margin_pp=rng.choice([20, 50])))
        elif test == "qr-bootstrap":
            statistic = rng.choice(["accuracy", "difference", "success-rate", "perturbed-accuracy"])
            if statistic == "accuracy":
                out.append(_hyp(hid, test, statistic=statistic, arm=a, min_pp=30, alpha=0.05))
            elif statistic == "difference":
                out.append(
                    _hyp(
                        hid,
                        test,
                        statistic=statistic,
                        contrast=[a, b],
                        sides=rng.choice(["one-sided", "two-sided"]),
                        alpha=0.05,
                    )
                )
            else:
                out.append(
                    _hyp(hid, test, statistic=statistic, contrast=[a, b], min_pp=5, alpha=0.05)
                )
        elif test == "paired-t" and rng.random() < 0.5:
            out.append(_hyp(hid, test, contrast=[a, b], pairing=["stimulus", "rep"], alpha=0.05))
        elif test in ("paired-t", "independent-t", "bootstrap", "lmm", "gee", "sign-test"):
            sides = rng.choice(["one-sided", "two-sided"])
            out.append(_hyp(hid, test, contrast=[a, b], sides=sides, alpha=0.05))
        else:
            out.append(_hyp(hid, test, contrast=[a, b], alpha=0.05))
    return out


def _mixes(rng: random.Random, design: Design, arms: list[str]) -> None:
    """Give each arm a behaviour: mostly the simulation, with the edges often enough."""
    for arm in arms:
        design.mix[arm] = rng.choices(MIXES, weights=(4, 2, 2, 1, 1, 2))[0]
    kinds = set(design.mix.values())
    if "correct" in kinds:
        design.tags.add("ceiling")
    if "wrong" in kinds:
        design.tags.add("floor")
    if "unparseable" in kinds:
        design.tags.add("arm-unparseable")
    if "holes" in kinds:
        design.tags.add("exclusions")


# families ------------------------------------------------------------------------------------


def _models_block(rng: random.Random, design: Design, temperature: float) -> tuple[str, list[str]]:
    """One ``[model]`` or two ``[models.*]`` (sometimes the same model id twice)."""
    count = rng.choice([1, 1, 2])
    if count == 1:
        return (
            f'[model]\nid = "claude-sonnet-4-6"\nmax_tokens = 256\ntemperature = {temperature}\n',
            [],
        )
    second = "claude-sonnet-4-6" if rng.random() < 0.4 else "claude-haiku-4-5"
    if second == "claude-sonnet-4-6":
        design.tags.add("identical-models")
    design.tags.add("models")
    text = ""
    for name, mid in (("m1", "claude-sonnet-4-6"), ("m2", second)):
        text += (
            f'[models.{name}]\nprovider = "anthropic"\nid = "{mid}"\nmax_tokens = 256\n'
            f"temperature = {temperature}\n\n"
        )
    return text, ["m1", "m2"]


def _head(design: Design, title: str, phase: str | None = None) -> str:
    text = f'[study]\nid = "conf-{design.seed}"\ntitle = "{title}"\n'
    if phase:
        text += f'phase = "{phase}"\n'
    return text + "\n"


def _design_block(rng: random.Random, reps: int, seed: int) -> str:
    return (
        f"[design]\nreplicates = {reps}\nseed = {seed}\nbootstrap_seed = {seed + 1}\n"
        f"bootstrap_iterations = 200\n"
    )


def _mc(rng: random.Random, design: Design, phases: bool = False) -> None:
    design.letters = True
    k = rng.choice([3, 4, 4, 5])
    n_items = rng.choice([2, 3, 4, 5])
    reps = rng.choice([1, 1, 2, 3])
    temperature = rng.choice([0.0, 0.0, 0.7])
    if temperature == 0.0 and reps > 1:
        design.tags.add("temp0-replicates")
    if n_items <= 2 and reps == 1:
        design.tags.add("tiny")
    items = _mc_items(rng, n_items, k)
    for item in items:
        key = "ABCDEF".index(item["answer"])
        design.answers[item["id"]] = item["options"][key]
        design.wrongs[item["id"]] = item["options"][(key + 1) % k]
    design.files["data/items.jsonl"] = _jsonl(items)
    design.files["prompts/item.txt"] = "Question: {question}\n{options}\n"
    design.files["prompts/direct.txt"] = "Reply with the letter of the correct option only.\n"
    design.files["prompts/rule.txt"] = "Read every option before you choose one.\n"
    design.files["prompts/note.txt"] = "Take a moment before you choose one.\n"
    design.files["prompts/cot.txt"] = (
        'Think step by step, then give the letter of the correct option as "Answer: X".\n'
    )
    design.files["prompts/system.txt"] = "You are a careful clinician answering exam questions.\n"
    models, model_names = _models_block(rng, design, temperature)
    fewshot = ""
    use_fewshot = rng.random() < 0.3
    if use_fewshot:
        examples = [
            {
                "id": f"ex{i}",
                "question": f"Example {i}: which drug is named {w}?",
                "options": [w, "saline", "glucose"][:k] + ["water", "air", "salt"][: k - 3],
                "answer": "A",
            }
            for i, w in ((1, "codeine"), (2, "quinine"))
        ]
        design.files["data/examples.jsonl"] = _jsonl(examples)
        design.files["prompts/answer.txt"] = "Answer: {answer}\n"
        fewshot = (
            '[fewshot.worked]\nexamples = "data/examples.jsonl"\nrule = "fixed"\n'
            'ids = ["ex1", "ex2"]\nanswer = "prompts/answer.txt"\n\n'
        )
        design.tags.add("fewshot")
    arms: dict[str, str] = {
        "full": 'role = "full"\ncomponents = ["item", "rule", "direct"]\n',
        "ctrl": (
            'role = "matched-control"\ncomponents = ["item", "note", "direct"]\n'
            'differs_from = { arm = "full", by = ["rule"] }\n'
        ),
        "bare": 'role = "vehicle"\ncomponents = ["direct"]\n',
        "sys": 'role = "dismantling"\ncomponents = ["item", "direct"]\nsystem = ["system"]\n',
        "cot": 'role = "factorial"\ncomponents = ["item", "cot"]\n',
    }
    names = ["full", "ctrl", *rng.sample(["bare", "sys", "cot"], rng.choice([0, 1, 1, 2]))]
    if use_fewshot:
        arms["full"] += 'fewshot = "worked"\n'
        arms["ctrl"] += 'fewshot = "worked"\n'
    variants = ""
    variant_names: list[str] = []
    if rng.random() < 0.4 and not phases:
        variant_names = ["original", *rng.sample(["rot1", "rev"], rng.choice([1, 2]))]
        bodies = {
            "original": 'kind = "identity"',
            "rot1": 'kind = "rotate"\nk = 1',
            "rev": 'kind = "reverse"',
        }
        variants = "".join(f"[variants.{v}]\n{bodies[v]}\n\n" for v in variant_names)
        design.tags.add("variants")
        reps = min(reps, 2)
    if len(names) * n_items * reps * max(1, len(variant_names)) * max(1, len(model_names)) > 90:
        reps = 1
    tests = [
        "mcnemar",
        "paired-t",
        "independent-t",
        "bootstrap",
        "lmm",
        "equivalence",
        "chi-square",
        "gee",
        "qr-bootstrap",
    ]
    if design.draws >= 2:
        tests.append("sign-test")
    hyps = _pair_hypotheses(rng, names, tests, count=rng.choice([2, 3, 4]))
    extra = len(hyps) + 1
    if variant_names and rng.random() < 0.7:
        arm = rng.choice(names)
        pick = rng.choice(["flip-rate", "voting", "position-bias", "mcnemar-variants"])
        if pick == "flip-rate":
            hyps.append(
                _hyp(
                    f"H{extra}",
                    "flip-rate",
                    arm=arm,
                    variants=variant_names[:2],
                    max_pp=rng.choice([50, 90]),
                    alpha=0.05,
                )
            )
        elif pick == "voting":
            hyps.append(
                _hyp(
                    f"H{extra}",
                    "voting",
                    arm=arm,
                    variants=variant_names,
                    sides="one-sided",
                    alpha=0.05,
                )
            )
        elif pick == "position-bias":
            a, b = rng.sample(names, 2)
            hyps.append(
                _hyp(
                    f"H{extra}",
                    "position-bias",
                    contrast=[a, b],
                    variant=variant_names[0],
                    alpha=0.05,
                )
            )
        else:
            hyps.append(
                _hyp(f"H{extra}", "mcnemar", arm=arm, variants=variant_names[:2], alpha=0.05)
            )
        design.tags.add(pick)
    elif temperature > 0 and reps >= 2 and rng.random() < 0.6:
        hyps.append(
            _hyp(
                f"H{extra}",
                "self-consistency",
                arm=rng.choice(names),
                samples=2,
                sides="one-sided",
                alpha=0.05,
            )
        )
        design.tags.add("self-consistency")
    mode = rng.choice(["exactly-one", "first-token"])
    exclude = rng.choice(["true", "false"])
    body_common = (
        f'[components]\ndirect = "prompts/direct.txt"\nrule = "prompts/rule.txt"\n'
        f'note = "prompts/note.txt"\ncot = "prompts/cot.txt"\n'
        f'system = "prompts/system.txt"\n\n[prompt]\nitem = "prompts/item.txt"\n\n{fewshot}'
        f"{variants}"
    )
    tail = (
        f'[stimuli]\nitems = "data/items.jsonl"\n\n{_design_block(rng, reps, design.seed)}\n'
        f'[response]\nparser = "multiple-choice"\nletters = "{"ABCDEF"[:k]}"\nmode = "{mode}"\n\n'
        f"[analysis]\nexclude_unparseable = {exclude}\n\n"
    )

    def spec(arm_names: list[str], hypotheses: list[str], phase: str | None) -> str:
        arm_text = "".join(f"[arms.{a}]\n{arms[a]}\n" for a in arm_names)
        return (
            _head(design, "Generated multiple-choice study", phase)
            + models
            + "\n"
            + body_common
            + arm_text
            + tail
            + "\n".join(hypotheses)
        )

    if phases:
        design.tags.add("phases")
        first = [a for a in names if a in ("full", "ctrl")]
        first_hyps = [
            h
            for h in hyps
            if all(f'"{a}"' in h for a in first)
            and not any(f'"{a}"' in h for a in names if a not in first)
        ]
        if not first_hyps:
            first_hyps = [_hyp("H0", "mcnemar", contrast=["full", "ctrl"], alpha=0.05)]
        later = [h for h in hyps if h not in first_hyps]
        if len(names) == 2:
            names.append("bare")
        if not later:
            later = [_hyp(f"H{extra + 1}", "bootstrap", contrast=[names[2], "full"], alpha=0.05)]
        design.phase_one = spec(first, first_hyps, "main")
        design.files["study.toml"] = spec(names, first_hyps + later, "more")
    else:
        design.files["study.toml"] = spec(names, hyps, None)
    _mixes(rng, design, names)


def _text(rng: random.Random, design: Design) -> None:
    parser = rng.choice(["yes-no-maybe", "exact", "normalized"])
    n_items = rng.choice([2, 3, 4, 6])
    reps = rng.choice([1, 2, 3])
    temperature = rng.choice([0.0, 1.0])
    if temperature == 0.0 and reps > 1:
        design.tags.add("temp0-replicates")
    items = []
    if parser == "yes-no-maybe":
        design.unparseable = "The abstract does not settle it."
        facts = [
            (
                "Does daily walking lower blood pressure?",
                "Daily walking lowered blood pressure in a trial of adults.",
                "yes",
            ),
            (
                "Does vitamin C prevent colds?",
                "Vitamin C did not prevent colds in most trials.",
                "no",
            ),
            ("Does music reduce pain after surgery?", "Small studies gave mixed results.", "maybe"),
        ]
        for i in range(n_items):
            q, c, a = facts[i % 3]
            items.append(
                {
                    "id": f"p{i + 1:02d}",
                    "question": f"{q} (case {i + 1})",
                    "context": c,
                    "answer": a,
                }
            )
            design.answers[f"p{i + 1:02d}"] = a
            design.wrongs[f"p{i + 1:02d}"] = {"yes": "no", "no": "maybe", "maybe": "yes"}[a]
        design.files["prompts/item.txt"] = "Context: {context}\nQuestion: {question}\n"
        instruction = "Answer yes, no or maybe.\n"
    else:
        design.unparseable = ""
        for i in range(n_items):
            x, y = rng.randrange(2, 9), rng.randrange(2, 9)
            answer = str(x + y)
            items.append(
                {"id": f"p{i + 1:02d}", "question": f"What is {x} plus {y}?", "answer": answer}
            )
            design.answers[f"p{i + 1:02d}"] = answer
            design.wrongs[f"p{i + 1:02d}"] = str(x + y + 1)
        design.files["prompts/item.txt"] = "Question: {question}\n"
        instruction = "Reply with the number only.\n"
    design.files["data/items.jsonl"] = _jsonl(items)
    design.files["prompts/task.txt"] = instruction
    design.files["prompts/evidence.txt"] = "Base your answer only on what is given.\n"
    design.files["prompts/system.txt"] = "You are a careful reader.\n"
    models, _ = _models_block(rng, design, temperature)
    names = ["evidence", "plain"] + (["sys"] if rng.random() < 0.5 else [])
    arms = {
        "evidence": 'role = "full"\ncomponents = ["item", "evidence", "task"]\n',
        "plain": (
            'role = "matched-control"\ncomponents = ["item", "task"]\n'
            'differs_from = { arm = "evidence", removes = ["evidence"] }\n'
        ),
        "sys": 'role = "dismantling"\ncomponents = ["item", "task"]\nsystem = ["system"]\n',
    }
    tests = [
        "mcnemar",
        "paired-t",
        "independent-t",
        "bootstrap",
        "lmm",
        "equivalence",
        "qr-bootstrap",
    ]
    if design.draws >= 2:
        tests.append("sign-test")
    if parser == "yes-no-maybe":
        tests.append("chi-square")
    hyps = _pair_hypotheses(rng, names, tests, count=rng.choice([2, 3]))
    mode = (
        f'mode = "{rng.choice(["exactly-one", "first-token"])}"\n'
        if (parser == "yes-no-maybe")
        else ""
    )
    design.files["study.toml"] = (
        _head(design, "Generated text study")
        + models
        + "\n"
        + '[components]\ntask = "prompts/task.txt"\nevidence = "prompts/evidence.txt"\n'
        + 'system = "prompts/system.txt"\n\n[prompt]\nitem = "prompts/item.txt"\n\n'
        + "".join(f"[arms.{a}]\n{arms[a]}\n" for a in names)
        + f'[stimuli]\nitems = "data/items.jsonl"\n\n{_design_block(rng, reps, design.seed)}\n'
        + f'[response]\nparser = "{parser}"\n{mode}\n'
        + f"[analysis]\nexclude_unparseable = {rng.choice(['true', 'false'])}\n\n"
        + "\n".join(hyps)
    )
    design.tags.add(parser)
    _mixes(rng, design, names)


def _image(rng: random.Random, design: Design) -> None:
    design.image_sources = rng.choice([2, 3])
    design.unparseable = "I cannot make it out."
    reps = rng.choice([1, 2])
    names = ["rule", "note"] + (["bare"] if rng.random() < 0.5 else [])
    design.files["prompts/task.txt"] = (
        "Which way does the top of this image point? Answer "
        "with one word: UP, RIGHT, DOWN or LEFT.\n"
    )
    design.files["prompts/rule.txt"] = (
        "Decoding rule: the top of an image is the side where most of its content sits.\n"
    )
    design.files["prompts/note.txt"] = "Reading note: look at the whole image first.\n"
    arms = {
        "rule": 'role = "full"\ncomponents = ["rule", "task"]\n',
        "note": (
            'role = "matched-control"\ncomponents = ["note", "task"]\n'
            'differs_from = { arm = "rule", by = ["rule"] }\n'
        ),
        "bare": 'role = "vehicle"\ncomponents = ["task"]\n',
    }
    tests = [
        "lmm",
        "mcnemar",
        "chi-square",
        "paired-t",
        "bootstrap",
        "qr-bootstrap",
        "independent-t",
    ]
    if design.draws >= 2:
        tests.append("sign-test")
    hyps = _pair_hypotheses(rng, names, tests, count=rng.choice([2, 3]))
    intercept = rng.choice(["stimulus", "source"])
    design.files["study.toml"] = (
        _head(design, "Generated image study")
        + '[model]\nid = "claude-sonnet-4-6"\nmax_tokens = 64\n'
        + f"temperature = {rng.choice([0.0, 1.0])}\n\n"
        + '[components]\nrule = "prompts/rule.txt"\nnote = "prompts/note.txt"\n'
        + 'task = "prompts/task.txt"\n\n'
        + "".join(f"[arms.{a}]\n{arms[a]}\n" for a in names)
        + '[stimuli]\ndirectory = "stimuli"\ntruth = "stimuli/truth.csv"\n\n'
        + _design_block(rng, reps, design.seed)
        + "\n"
        + '[response]\nparser = "orientation-word"\n\n'
        + f'[analysis]\nrandom_intercept = "{intercept}"\n'
        + f"exclude_unparseable = {rng.choice(['true', 'false'])}\n\n"
        + "\n".join(hyps)
    )
    design.tags.add(f"intercept-{intercept}")
    _mixes(rng, design, names)


def _factorial(rng: random.Random, design: Design) -> None:
    n_items = rng.choice([3, 4, 5])
    reps = rng.choice([1, 2])
    design.unparseable = ""
    items = []
    for i in range(n_items):
        x, y = rng.randrange(2, 9), rng.randrange(2, 9)
        items.append(
            {"id": f"f{i + 1:02d}", "question": f"What is {x} plus {y}?", "answer": str(x + y)}
        )
        design.answers[f"f{i + 1:02d}"] = str(x + y)
        design.wrongs[f"f{i + 1:02d}"] = str(x + y + 2)
    design.files["items.jsonl"] = _jsonl(items)
    design.files["prompts/item.txt"] = "Question: {question}\n"
    design.files["prompts/task.txt"] = "Reply with the number only.\n"
    design.files["prompts/urgent.txt"] = "Please hurry, this is urgent!\n"
    design.files["prompts/calm.txt"] = "You are a calm and careful assistant.\n"
    prompt_level = rng.choice(['{ components = ["urgent"] }', '{ system = ["calm"] }'])
    three = rng.random() < 0.3
    belief = [
        "levels.none = {}",
        'levels.hint = { insert = { field = "question", text = "I think it is odd.", '
        'at = "end" } }',
    ]
    if three:
        belief.append(
            'levels.doubt = { insert = { field = "question", text = "Check it twice.",'
            ' at = "start", separator = "\\n\\n" } }'
        )
    belief_levels = [line.split(" ")[0].split(".")[1] for line in belief]
    tone_levels = ["neutral", "pressed"]
    cells = [f"F.{b}.{t}" for b in belief_levels for t in tone_levels]
    hyps = [_hyp("H1", "factorial", effect=["belief"], alpha=0.05)]
    if rng.random() < 0.6:
        hyps.append(_hyp("H2", "factorial", effect=["belief", "tone"], alpha=0.05))
    else:
        hyps.append(_hyp("H2", "factorial", effect=["tone"], alpha=0.05))
    hyps += _pair_hypotheses(rng, cells, ["mcnemar", "qr-bootstrap", "paired-t"], start=3, count=1)
    design.files["study.toml"] = (
        _head(design, "Generated factorial study")
        + '[model]\nid = "claude-sonnet-4-6"\nmax_tokens = 64\n'
        + f"temperature = {rng.choice([0.0, 1.0])}\n\n"
        + '[components]\ntask = "prompts/task.txt"\nurgent = "prompts/urgent.txt"\n'
        + 'calm = "prompts/calm.txt"\n\n[prompt]\nitem = "prompts/item.txt"\n\n'
        + '[factors.belief]\nscope = "item"\n'
        + "\n".join(belief)
        + "\n\n"
        + '[factors.tone]\nscope = "prompt"\nlevels.neutral = {}\n'
        + f"levels.pressed = {prompt_level}\n\n"
        + '[factorial]\nbase = "F"\nfactors = ["belief", "tone"]\n\n'
        + '[arms.F]\nrole = "factorial"\ncomponents = ["task"]\n\n'
        + f'[stimuli]\nitems = "items.jsonl"\n\n{_design_block(rng, reps, design.seed)}\n'
        + f'[response]\nparser = "{rng.choice(["exact", "normalized"])}"\n\n'
        + f"[analysis]\nexclude_unparseable = {rng.choice(['true', 'false'])}\n\n"
        + "\n".join(hyps)
    )
    design.tags.add("system-level" if "system" in prompt_level else "component-level")
    if three:
        design.tags.add("three-levels")
    _mixes(rng, design, cells)


JUDGE_TEMPLATE = (
    "Is the candidate answer correct? Answer correct or incorrect.\n"
    "Reference: {reference}\nCandidate: {response}\n"
)


def _judge(rng: random.Random, design: Design) -> None:
    n_items = rng.choice([2, 3, 4])
    reps = rng.choice([1, 2])
    judges = rng.choice([["judge_a"], ["judge_a", "judge_b"], ["judge_a", "judge_b", "judge_c"]])
    design.tags.add(f"judges-{len(judges)}")
    design.unparseable = ""
    conditions = ["fever", "cough", "rash", "anaemia", "asthma", "gout"]
    items = []
    for i in range(n_items):
        word = conditions[i]
        items.append(
            {
                "id": f"c{i + 1:02d}",
                "question": "Which condition does the patient have?",
                "context": f"The patient has the condition {word}.",
                "answer": word,
            }
        )
        design.answers[f"c{i + 1:02d}"] = f"The patient has {word}."
        design.wrongs[f"c{i + 1:02d}"] = "The patient has a headache."
    design.files["data/items.jsonl"] = _jsonl(items)
    design.files["prompts/item.txt"] = "Question: {question}\nCase: {context}\n"
    design.files["prompts/task.txt"] = "Answer in one sentence.\n"
    design.files["prompts/system.txt"] = "You are a careful clinician.\n"
    design.files["prompts/judge.txt"] = JUDGE_TEMPLATE
    models = (
        '[models.target]\nprovider = "anthropic"\nid = "claude-sonnet-4-6"\n'
        "max_tokens = 64\ntemperature = 0.0\n\n"
    )
    judge_ids = {
        "judge_a": "claude-haiku-4-5",
        "judge_b": "claude-opus-4-1",
        "judge_c": "claude-sonnet-4-5",
    }
    for name, mid in judge_ids.items():
        if name in judges:
            models += (
                f'[models.{name}]\nprovider = "anthropic"\nid = "{mid}"\n'
                "max_tokens = 16\ntemperature = 0.0\n\n"
            )
    aggregate = rng.choice(['"majority"', '"unanimous"']) if len(judges) > 1 else '"majority"'
    retry = rng.choice([0, 1])
    step = (
        f'[steps.judge]\non = "trial"\nmodels = {_toml_list(judges)}\n'
        f'template = "prompts/judge.txt"\nparser = "label"\n'
        f'labels = ["correct", "incorrect"]\naggregate = {aggregate}\n'
        f'on_unparseable = {{ retry = {retry}, then = "exclude" }}\n\n'
    )
    names = ["plain", "sys"]
    arms = {
        "plain": 'role = "vehicle"\ncomponents = ["item", "task"]\nmodels = ["target"]\n',
        "sys": (
            'role = "dismantling"\ncomponents = ["item", "task"]\nsystem = ["system"]\n'
            'models = ["target"]\n'
        ),
    }
    hyps = _pair_hypotheses(
        rng, names, ["paired-t", "mcnemar", "bootstrap", "qr-bootstrap", "independent-t"], count=2
    )
    design.files["study.toml"] = (
        _head(design, "Generated judged study")
        + models
        + '[components]\ntask = "prompts/task.txt"\nsystem = "prompts/system.txt"\n\n'
        + '[prompt]\nitem = "prompts/item.txt"\n\n'
        + "".join(f"[arms.{a}]\n{arms[a]}\n" for a in names)
        + step
        + f'[stimuli]\nitems = "data/items.jsonl"\n\n{_design_block(rng, reps, design.seed)}\n'
        + '[response]\nparser = "judge:judge"\n\n'
        + f"[analysis]\nexclude_unparseable = {rng.choice(['true', 'false'])}\n\n"
        + "\n".join(hyps)
    )
    design.tags.add("steps")
    _mixes(rng, design, names)


GENERATOR_DRAWS = 2
"""The version of the generator's draws: 1 before ``sign-test`` joined the drawn tests, 2 with it.

A new kind of draw changes the designs of existing seeds (any extra ``rng`` call shifts the rest).
The regression cases below were found at version 1 and pin their design's digest, so they ask for
``draws=1``; the slice and the soak draw at the latest version. Adding a kind: raise this, and
guard the new draw with ``design.draws >= N`` so that every older version still generates the
same bytes."""


def generate(seed: int, family: str | None = None, draws: int = GENERATOR_DRAWS) -> Design:
    """The design of ``seed`` (its family drawn too, unless given), at version ``draws``."""
    if not 1 <= draws <= GENERATOR_DRAWS:
        raise ValueError(f"draws: versions 1 to {GENERATOR_DRAWS}, not {draws}")
    rng = random.Random(f"prompt-ledger conformance {seed}")
    family = family or rng.choice(FAMILIES)
    design = Design(seed=seed, family=family, draws=draws)
    if family == "mc":
        _mc(rng, design)
    elif family == "phases":
        _mc(rng, design, phases=True)
    elif family == "text":
        _text(rng, design)
    elif family == "image":
        _image(rng, design)
    elif family == "factorial":
        _factorial(rng, design)
    elif family == "judge":
        _judge(rng, design)
    else:
        raise ValueError(f"unknown family {family!r}")
    return design


def write_study(design: Design, root: Path, spec: str | None = None) -> None:
    """Write the design's files into ``root`` (``spec`` in place of its ``study.toml``)."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in design.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec if (rel == "study.toml" and spec is not None) else text, "utf-8")
    if design.image_sources and not (root / "stimuli").exists():
        from single_answer import write_sources

        from runner._stimuli import rotate_images

        write_sources(root / "sources", design.image_sources)
        rotate_images(root / "sources", root / "stimuli")
        truth = (root / "stimuli" / "truth.csv").read_text("utf-8").splitlines()[1:]
        turn = {"UP": "RIGHT", "RIGHT": "DOWN", "DOWN": "LEFT", "LEFT": "UP"}
        for row in truth:
            stimulus, _source, orientation = row.split(",")[:3]
            design.answers[stimulus] = orientation
            design.wrongs[stimulus] = turn[orientation]


# ----------------------------------------------------------------------------------- the backend


class MixBackend:
    """The simulated backend with the design's response mix on its target trials.

    A step call (a judge) and every arm whose behaviour is ``sim`` get the simulation's reply
    unchanged; the other arms get the simulation's reply with its text replaced (its model,
    usage and labels kept). It is labelled simulated, as the simulation is.
    """

    name = "simulated"
    simulated = True
    priced = False

    def __init__(self, design: Design) -> None:
        """Wrap a fresh :class:`runner._backends.SimulatedBackend`."""
        from runner._backends import SimulatedBackend

        self.inner = SimulatedBackend()
        self.wire_format = self.inner.wire_format
        self.design = design

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The simulation's wire body (the request as it is)."""
        return self.inner.wire_body(body)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """The simulation's estimate."""
        return await self.inner.count_tokens(body)

    async def aclose(self) -> None:
        """Nothing to release."""
        await self.inner.aclose()

    def _text(self, behaviour: str, stimulus: str, trial: str, body: dict[str, Any]) -> str:
        d = self.design
        if behaviour == "coin":
            coin = hashlib.sha256(f"coin|{trial}".encode()).digest()[0] % 2
            behaviour = "correct" if coin else "wrong"
        if behaviour == "holes":
            hole = hashlib.sha256(f"hole|{trial}".encode()).digest()[0] % 5 == 0
            behaviour = "unparseable" if hole else "correct"
        if behaviour == "unparseable":
            return d.unparseable
        wanted = d.answers[stimulus] if behaviour == "correct" else d.wrongs[stimulus]
        if not d.letters:
            return wanted
        last = body["messages"][-1]["content"]
        text = "".join(part.get("text", "") for part in last if part.get("type") == "text")
        options = dict((t, letter) for letter, t in re.findall(r"^([A-Z])\. (.*)$", text, re.M))
        return options[wanted]

    async def send(self, body: dict[str, Any], *, seed: str) -> Any:
        """Answer as the simulation does, then apply the arm's behaviour to a target trial."""
        from runner._backends import reply_from_messages_json
        from runner.simulated._steps import is_step_seed

        reply = await self.inner.send(body, seed=seed)
        if is_step_seed(seed):
            return reply
        parts = seed.split("|")
        trial = "|".join(parts[1:-1])
        behaviour = self.design.mix.get(parts[1], "sim")
        if behaviour == "sim":
            return reply
        stimulus = next(p for p in parts[2:-1] if p in self.design.answers)
        data = json.loads(reply.raw)
        text = self._text(behaviour, stimulus, trial, body)
        data["content"] = [{"type": "text", "text": text}]
        data["usage"]["output_tokens"] = max(1, len(text) // 4)
        raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return reply_from_messages_json(raw, 200, None)


# ----------------------------------------------------------------------------------- the pipeline


def run_live(design: Design, base: Path, key: SigningKey, store: str | None = None) -> Path:
    """Write, lock (twice for phases), run, score, unblind and analyse; the study folder.

    ``store`` (a ``postgresql://...?schema=NAME`` URL) keeps the ledger on PostgreSQL: the
    folder then holds ``ledger.store`` naming it, as ``ledger new --store`` writes it.
    """
    import analysis
    import runner

    root = base / "study"
    write_study(design, root, spec=design.phase_one)
    if store is not None:
        (root / "ledger.store").write_text(store + "\n", "utf-8")
    runner.lock_study(root, key)
    if design.phase_one is not None:
        (root / "study.toml").write_text(design.files["study.toml"], "utf-8")
        runner.lock_study(root, key)
    runner.run_study(root, key, MixBackend(design), runner.RunOptions(concurrency=1))  # type: ignore[arg-type]
    analysis.score_study(root, key)
    analysis.unblind_study(root, key)
    analysis.analyze_study(root, key)
    return root


def run_design(design: Design, base: Path, key: SigningKey) -> Path:
    """:func:`run_live`, then export; the archive."""
    import analysis

    root = run_live(design, base, key)
    archive = base / "archive"
    analysis.export_study(root, archive, key)
    return archive


def failures(report: Report) -> str:
    """Every FAILed check of ``report``, one per line."""
    return "\n".join(
        f"{c.name}: {c.reason} @ {c.where} seq {c.seq}"
        for c in report.checks
        if c.status is Status.FAIL
    )


def verify_honest(design: Design, archive: Path, key: SigningKey) -> Report:
    """Verify the honest archive, trusting the owner key; it must say VERIFIED."""
    report = verify_archive(archive, trusted_keys=[key.vkey])
    assert report.ok, f"honest archive FAILED: {design.describe()}\n{failures(report)}"
    return report


# ----------------------------------------------------------------------------------- tampers


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _put_blob(root: Path, data: bytes) -> str:
    digest = _sha(data)
    (root / "blobs" / digest).write_bytes(data)
    return digest


def _refresh_export(root: Path, events: list[dict[str, Any]]) -> None:
    """Make the last ``export.created`` name the files and blobs as they are now, and drop
    blobs no event references (a careful forger's archive has no loose ends)."""
    referenced = {d for e in events[:-1] for d in e["blobs"].values()}
    for blob in (root / "blobs").iterdir():
        if blob.name not in referenced:
            blob.unlink()
    names = sorted(p.name for p in (root / "blobs").iterdir())
    body = events[-1]["body"]
    body["blobs"] = {
        "count": len(names),
        "listing_sha256": _sha("".join(n + "\n" for n in names).encode()),
    }
    for rel in body["files"]:
        body["files"][rel] = _sha((root / rel).read_bytes())


def _forge(root: Path, events: list[dict[str, Any]], key: SigningKey) -> None:
    _refresh_export(root, events)
    resign(root, events, key)


@dataclass(frozen=True)
class Tamper:
    """One forgery: ``apply`` edits an archive copy and returns the check that owns it and a
    fragment of the message that check must give (None when the design has nothing of that
    kind: no step calls, no verdict); ``check`` is the owner in the usual case, for the docs."""

    name: str
    check: str
    apply: Callable[[Path, SigningKey], tuple[str, str] | None]


def _scored_responses(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["body"]["response_seq"]: e for e in events if e["kind"] == "trial.scored"}


def tamper_response(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A trial's response says nothing where it said something the parser read, or something
    where a judge read nothing (its blob replaced, re-signed). A judged study's score is the
    judge's, so there the judge's request, which quotes the response, no longer re-renders:
    ``steps`` owns it."""
    events = read_events(root)
    scored = _scored_responses(events)
    for e in events:
        score = scored.get(e["seq"])
        if e["kind"] != "trial.responded" or score is None or score["body"]["status"] != "ok":
            continue
        if e["body"].get("format") != "anthropic-messages":
            continue
        data = json.loads((root / "blobs" / e["blobs"]["response"]).read_bytes())
        old = "".join(p.get("text", "") for p in data.get("content", []))
        if old.strip() == "" and "judge" not in score["body"]:
            continue  # an empty reply the parser read: nothing to empty
        # empty the reply (every parser then reads nothing); a judged empty reply gets words
        data["content"] = [{"type": "text", "text": "" if old.strip() else "forged reply"}]
        e["blobs"]["response"] = _put_blob(root, json.dumps(data).encode())
        _forge(root, events, key)
        if "judge" in score["body"]:
            return "steps", "is not the one re-rendered from the locked template"
        return "rescore", f"trial.scored seq {score['seq']}"
    return None


def tamper_score(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A recorded score says right where the response was wrong (or the reverse); the score's
    blob, its hash and the seal are recomputed so they agree with each other."""
    events = read_events(root)
    for e in events:
        if e["kind"] != "trial.scored" or e["body"]["status"] != "ok":
            continue
        items = json.loads((root / "blobs" / e["blobs"]["scores"]).read_bytes())
        items[0]["correct"] = not items[0]["correct"]
        e["body"]["n_correct"] = sum(1 for i in items if i["correct"])
        digest = _put_blob(root, canonical_json(items))
        e["blobs"]["scores"] = digest
        e["body"]["scores_sha256"] = digest
        pairs = sorted(
            [s["body"]["response_seq"], s["body"]["scores_sha256"]]
            for s in events
            if s["kind"] == "trial.scored"
        )
        seal = next(s for s in events if s["kind"] == "scoring.sealed")
        seal["body"]["scores_sha256"] = _sha(canonical_json(pairs))
        _forge(root, events, key)
        return "rescore", f"trial.scored seq {e['seq']}"
    return None


def _hypothesis_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e["kind"] == "analysis.result"
        and e["body"]["id"].startswith("hypothesis.")
        and e["body"]["status"] == "ok"
    ]


def tamper_statistic(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A recorded statistic of a hypothesis is changed (its p-value or estimate)."""
    events = read_events(root)
    for e in _hypothesis_results(events):
        values = e["body"]["values"]
        for name in ("p", "p_raw", "estimate", "p_adjusted"):
            value = values.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[name] = value + 0.125 if value < 0.5 else value - 0.125
                _forge(root, events, key)
                return "reanalysis", e["body"]["id"]
    return None


def tamper_verdict(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A hypothesis's verdict is turned over."""
    events = read_events(root)
    flip = {"supported": "not supported", "not supported": "supported"}
    for e in _hypothesis_results(events):
        if e["body"].get("verdict") in flip:
            e["body"]["verdict"] = flip[e["body"]["verdict"]]
            _forge(root, events, key)
            return "reanalysis", e["body"]["id"]
    return None


def tamper_report_cell(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A cell of ``analysis/report.html`` says another number (the owner re-signs the export)."""
    path = root / "analysis" / "report.html"
    html = path.read_text("utf-8")
    for match in re.finditer(r"<td[^>]*>(\d+)</td>", html):
        number = match.group(1)
        start, end = match.span(1)
        html = html[:start] + str(int(number) + 1) + html[end:]
        path.write_text(html, "utf-8")
        _forge(root, read_events(root), key)
        return "report", "analysis/report.html"
    return None


def tamper_arm_text(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """An arm's composed text in ``protocol/arms/`` is edited (the owner re-signs the export)."""
    arms = sorted((root / "protocol" / "arms").iterdir())
    path = arms[0]
    path.write_text(path.read_text("utf-8") + "Always answer A.\n", "utf-8")
    _forge(root, read_events(root), key)
    return "protocol", f"protocol/arms/{path.name}"


def tamper_step_output(root: Path, key: SigningKey) -> tuple[str, str] | None:
    """A judge's recorded reply says the other label (its blob replaced, re-signed). ``steps``
    re-derives the decision from the replies as they now stand; ``rescore`` owns the forgery:
    the recorded score's votes are no longer those the replies give."""
    events = read_events(root)
    for e in events:
        if e["kind"] != "step.responded":
            continue
        blob = root / "blobs" / e["blobs"]["response"]
        data = json.loads(blob.read_bytes())
        old = "".join(p.get("text", "") for p in data.get("content", []))
        if old.strip() not in ("correct", "incorrect"):
            continue
        data["content"] = [
            {"type": "text", "text": "incorrect" if old.strip() == "correct" else "correct"}
        ]
        e["blobs"]["response"] = _put_blob(root, json.dumps(data).encode())
        _forge(root, events, key)
        return "rescore", "the judge votes or decision differ"
    return None


TAMPERS: tuple[Tamper, ...] = (
    Tamper("response", "rescore", tamper_response),
    Tamper("score", "rescore", tamper_score),
    Tamper("statistic", "reanalysis", tamper_statistic),
    Tamper("verdict", "reanalysis", tamper_verdict),
    Tamper("report-cell", "report", tamper_report_cell),
    Tamper("arm-text", "protocol", tamper_arm_text),
    Tamper("step-output", "rescore", tamper_step_output),
)
"""The tamper table: name, the check that must FAIL, the forgery."""


def apply_tamper(tamper: Tamper, archive: Path, work: Path, key: SigningKey) -> str | None:
    """Forge a copy of ``archive`` and verify it: the owning check must FAIL naming the place.

    Returns None when the design has nothing for this tamper (no step calls, no verdict), else
    the check's reason. A tamper that a check other than ``rescore`` or ``reanalysis`` owns is
    verified without the science checks (``helpers.science_skipped``), one that ``rescore`` owns
    without ``reanalysis`` (``helpers.reanalysis_skipped``): nothing here reads them, and the honest
    archive was verified with them.
    """
    target = work / f"tamper-{tamper.name}"
    shutil.copytree(archive, target)
    try:
        owned = tamper.apply(target, key)
        if owned is None:
            return None
        owner, fragment = owned
        if owner == "rescore":  # reanalysis (every model refitted) could only add a FAIL
            with reanalysis_skipped():
                report = verify_archive(target, trusted_keys=[key.vkey])
        elif owner in SCIENCE_CHECKS:
            report = verify_archive(target, trusted_keys=[key.vkey])
        else:  # a FAIL is expected elsewhere: the science checks could only add to it
            with science_skipped():
                report = verify_archive(target, trusted_keys=[key.vkey])
        check = report.get(owner)
        assert check is not None, f"{tamper.name}: check {owner} was not run"
        assert check.status is Status.FAIL, (
            f"tamper {tamper.name} was not caught by {owner} ({check.status.value}: "
            f"{check.reason}); other failures:\n{failures(report)}"
        )
        said = f"{check.reason} @ {check.where} seq {check.seq}"
        assert fragment in said, f"tamper {tamper.name}: {owner} says {said!r}, not {fragment!r}"
        for name in ("signatures", "chain", "trust", "manifest"):
            passed = report.get(name)
            assert passed is not None and passed.status is Status.PASS, (tamper.name, passed)
        return said
    finally:
        shutil.rmtree(target, ignore_errors=True)


@dataclass
class Tally:
    """What a run of the suite did: honest archives verified, tampers caught, by kind."""

    honest: int = 0
    tampers: dict[str, int] = field(default_factory=dict)
    families: dict[str, int] = field(default_factory=dict)
    tags: dict[str, int] = field(default_factory=dict)

    def add(self, design: Design, caught: list[str]) -> None:
        """Count one verified design and the tampers caught on it."""
        self.honest += 1
        self.families[design.family] = self.families.get(design.family, 0) + 1
        for tag in design.tags:
            self.tags[tag] = self.tags.get(tag, 0) + 1
        for name in caught:
            self.tampers[name] = self.tampers.get(name, 0) + 1

    def line(self) -> str:
        """The counts in one line."""
        total = sum(self.tampers.values())
        return (
            f"conformance: {self.honest} honest archives VERIFIED, {total} tampers FAILED "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.tampers.items()))}); families "
            f"{dict(sorted(self.families.items()))}; tags {dict(sorted(self.tags.items()))}"
        )


def check_design(design: Design, base: Path, key: SigningKey, tally: Tally | None = None) -> None:
    """The whole contract for one design: the honest archive verifies, every tamper fails."""
    archive = run_design(design, base, key)
    verify_honest(design, archive, key)
    caught = []
    for tamper in TAMPERS:
        try:
            said = apply_tamper(tamper, archive, base, key)
        except AssertionError as exc:
            raise AssertionError(f"{design.describe()}: {exc}") from None
        if said is not None:
            caught.append(tamper.name)
    if tally is not None:
        tally.add(design, caught)


def owner_key(seed: int) -> SigningKey:
    """A fixed owner key per design (so the same seed gives the same archive)."""
    return SigningKey(
        f"conf-{seed}.example/owner", hashlib.sha256(f"conformance owner {seed}".encode()).digest()
    )


__all__ = [
    "FAMILIES",
    "TAMPERS",
    "Design",
    "MixBackend",
    "Tally",
    "Tamper",
    "apply_tamper",
    "check_design",
    "generate",
    "owner_key",
    "run_design",
    "verify_honest",
    "write_study",
]
