"""Render the request of a trial from the locked study (``docs/prompts.md``, normative).

Templates (:func:`parse_template`) are text with ``{slot}`` placeholders, ``{{`` and ``}}`` for
literal braces, and nothing else; an item fills the slots (:func:`item_values`). A trial's
request is built by :class:`Renderer`: the item block, the arm's components around it, the
system prompt, the few-shot examples drawn for the item (:func:`draw_examples`) as prior turns
or inline, and the model's sampling parameters with the arm's overrides. The verifier
re-implements all of this from the docs and compares every recorded request byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ledger import describe_utf8_error
from runner._errors import SpecError, StimulusError
from runner._factors import Factor, Level
from runner._items import Item, ItemSet, load_items
from runner._stimuli import check_image_for_api
from runner.spec import Arm, FewShotSpec, ModelSpec, Study

__all__ = [
    "ANSWER_SLOTS",
    "Renderer",
    "Slot",
    "Template",
    "draw_examples",
    "item_values",
    "parse_template",
    "prior_trial",
    "random_order",
    "request_parameters",
]

_SLOT_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+){0,2}")
ANSWER_SLOTS: Final = frozenset({"answer", "answer_text", "rationale"})
"""Slots only an answer template may use: the key must never reach the model."""
_OPTION_SLOT: Final = re.compile(r"^option_([A-Z])$")


@dataclass(frozen=True)
class Slot:
    """A ``{name}`` placeholder and where it stands (1-based line and column)."""

    name: str
    line: int
    column: int


@dataclass(frozen=True)
class Template:
    """A parsed template: literal texts and slots, in order."""

    name: str
    parts: tuple[str | Slot, ...]

    def slots(self) -> list[Slot]:
        """Every slot, in order of appearance."""
        return [p for p in self.parts if isinstance(p, Slot)]

    def render(self, values: Mapping[str, str]) -> str:
        """The text with each slot replaced by its value (KeyError for a slot without one)."""
        return "".join(p if isinstance(p, str) else values[p.name] for p in self.parts)


def parse_template(text: str, name: str) -> Template:
    """Parse ``text`` by ``docs/prompts.md`` section 2; :class:`SpecError` names line and column."""
    parts: list[str | Slot] = []
    literal: list[str] = []
    problems: list[str] = []
    i = 0
    line, col = 1, 1

    def advance(chunk: str) -> None:
        nonlocal line, col
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            col = len(chunk) - chunk.rfind("\n")
        else:
            col += len(chunk)

    while i < len(text):
        ch = text[i]
        if ch == "{" and text.startswith("{{", i):
            literal.append("{")
            advance("{{")
            i += 2
        elif ch == "}" and text.startswith("}}", i):
            literal.append("}")
            advance("}}")
            i += 2
        elif ch == "{":
            match = _SLOT_NAME.match(text, i + 1)
            if match is None or not text.startswith("}", match.end()):
                problems.append(
                    f"{name}:{line}:{col}: '{{' starts no slot (write '{{{{' for a literal brace, "
                    "or {name} with a slot name)"
                )
                literal.append("{")
                advance("{")
                i += 1
                continue
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(Slot(match.group(0), line, col))
            advance(text[i : match.end() + 1])
            i = match.end() + 1
        elif ch == "}":
            problems.append(
                f"{name}:{line}:{col}: '}}' closes no slot (write '}}}}' for a literal)"
            )
            literal.append("}")
            advance("}")
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in "{}":
                j += 1
            literal.append(text[i:j])
            advance(text[i:j])
            i = j
    if literal:
        parts.append("".join(literal))
    if problems:
        raise SpecError(problems)
    return Template(name, tuple(parts))


def _read_template(path: Path, name: str) -> Template:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([f"{name}: {describe_utf8_error(data, exc)}"]) from None
    return parse_template(text, name)


def item_values(
    item: Item, option_format: Template, separator: str, *, answers: bool = False
) -> dict[str, str]:
    """Every slot value ``item`` fills (``docs/prompts.md`` section 2).

    ``answers`` adds ``answer``, ``answer_text`` (with options) and ``rationale`` (when the item
    has one): the values only an answer template may use.
    """
    values: dict[str, str] = {"id": item.id}
    for name, text in item.text_fields().items():
        if name != "rationale" or answers:
            values[name] = text
    if item.options:
        lines = [
            option_format.render({"label": label, "text": text})
            for label, text in zip(item.labels, item.options, strict=True)
        ]
        values["options"] = separator.join(lines)
        for label, text in zip(item.labels, item.options, strict=True):
            values[f"option_{label}"] = text
    for key, value in item.metadata.items():
        if isinstance(value, str):
            values[f"metadata.{key}"] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            # an array of strings (a supplied reference set, scoring.md §12): canonical JSON
            values[f"metadata.{key}"] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if answers:
        values["answer"] = item.answer
        if item.options and item.answer in item.labels:
            values["answer_text"] = item.options[item.labels.index(item.answer)]
    return values


def random_order(seed: str, item_id: str, examples: Sequence[Item]) -> list[Item]:
    """Examples by ascending ``SHA-256("{seed}|{item id}|{example id}")`` (section 4)."""
    return sorted(
        examples,
        key=lambda e: hashlib.sha256(f"{seed}|{item_id}|{e.id}".encode()).hexdigest(),
    )


def draw_examples(spec: FewShotSpec, examples: ItemSet, item: Item) -> list[Item]:
    """The examples ``spec`` draws for test ``item``, in the order they are shown.

    Raises :class:`ValueError` saying why when fewer than ``count`` can be drawn.
    """
    if spec.rule == "fixed":
        missing = [i for i in spec.ids if i not in examples.by_id]
        if missing:
            raise ValueError(f"example id(s) {', '.join(missing)} not in the example file")
        drawn = [examples.by_id[i] for i in spec.ids]
    else:
        order = random_order(spec.seed or "0", item.id, list(examples))
        drawn = _DRAW_RULES.get(spec.rule, _draw_distinct)(spec, order, item)
        if len(drawn) < spec.count:
            raise ValueError(
                f"the {spec.rule} rule finds {len(drawn)} example(s) for item {item.id!r}, "
                f"{spec.count} are needed"
            )
    if spec.order == "id":
        drawn = sorted(drawn, key=lambda e: e.id)
    elif spec.order == "reverse":
        drawn = drawn[::-1]
    return drawn


def _draw_random(spec: FewShotSpec, order: list[Item], item: Item) -> list[Item]:
    """``random``: the first ``count`` examples of the item's random order."""
    return order[: spec.count]


def _draw_balanced(spec: FewShotSpec, order: list[Item], item: Item) -> list[Item]:
    """``label-balanced``: one example per answer label in turn, in the item's random order."""
    labels = sorted({e.answer for e in order})
    queues = {label: [e for e in order if e.answer == label] for label in labels}
    drawn: list[Item] = []
    while len(drawn) < spec.count and any(queues.values()):
        for label in labels:
            if queues[label] and len(drawn) < spec.count:
                drawn.append(queues[label].pop(0))
    return drawn


def _draw_same(spec: FewShotSpec, order: list[Item], item: Item) -> list[Item]:
    """``same-metadata``: examples whose ``field`` equals the item's."""
    mine = item.metadata.get(spec.field or "")
    if not isinstance(mine, str):
        raise ValueError(f"item {item.id!r} has no string metadata {spec.field!r}")
    return [e for e in order if e.metadata.get(spec.field or "") == mine][: spec.count]


def _draw_distinct(spec: FewShotSpec, order: list[Item], item: Item) -> list[Item]:
    """``distinct-metadata``: one example per value of ``field``."""
    seen: set[str] = set()
    drawn: list[Item] = []
    for e in order:
        value = e.metadata.get(spec.field or "")
        if isinstance(value, str) and value not in seen and len(drawn) < spec.count:
            seen.add(value)
            drawn.append(e)
    return drawn


#: The drawing rules other than ``fixed`` (``docs/prompts.md`` section 4); the spec allows
#: no other.
_DRAW_RULES: dict[str, Callable[[FewShotSpec, list[Item], Item], list[Item]]] = {
    "random": _draw_random,
    "label-balanced": _draw_balanced,
    "same-metadata": _draw_same,
    "distinct-metadata": _draw_distinct,
}


def request_parameters(model: ModelSpec, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The request's sampling members: the model's parameters, the arm's overrides on top."""
    merged = {**model.params, **sampling}
    out: dict[str, Any] = {
        k: merged[k] for k in ("max_tokens", "temperature", "top_p", "top_k") if k in merged
    }
    if "stop" in merged:
        out["stop_sequences"] = list(merged["stop"])
    if "logprobs" in merged:  # docs/prompts.md §5: cloze scoring reads them
        out["logprobs"] = True
        out["top_logprobs"] = merged["logprobs"]
    return out


def _level_templates(study: Study) -> dict[Path, Template]:
    """The item templates the factors' levels name, each read once."""
    out: dict[Path, Template] = {}
    for factor in study.factors.values():
        for lv in factor.levels:
            if lv.template is not None and lv.template not in out:
                out[lv.template] = _read_template(lv.template, study.rel(lv.template))
    return out


def _component_templates(study: Study, texts: Mapping[str, str]) -> dict[str, Template]:
    """The components of answer-dependent arms, as templates of ``{prior.*}`` (§9)."""
    out: dict[str, Template] = {}
    for arm in study.arms.values():
        if arm.after is None:
            continue
        for name in arm.components:
            if name in texts and name not in out:
                out[name] = parse_template(texts[name], study.rel(study.components[name]))
    return out


class Renderer:
    """Every request of a study, rendered from its files (read once)."""

    def __init__(self, study: Study) -> None:
        """Read the study's components, templates, items, example sets and images.

        Raises :class:`SpecError` for a template or file that cannot be used.
        """
        self.study = study
        self.models = {m.name: m for m in study.model_specs()}
        self.texts = {name: study.component_text(name) for name in study.components}
        prompt = study.prompt
        self.option_format = parse_template(prompt.option_format, "[prompt] option_format")
        self.separator = prompt.option_separator
        self.item_template = (
            _read_template(prompt.item, study.rel(prompt.item)) if prompt.item else None
        )
        # docs/study-spec.md "Factors": a level's item template, and the cells' edited items
        self.level_templates = _level_templates(study)
        self._edited: dict[tuple[str, str, str | None], Item] = {}
        self.items: ItemSet | None = study.load_items() if study.item_study else None
        self.examples: dict[str, ItemSet] = {}
        self.answer_templates: dict[str, Template] = {}
        for name, fs in study.fewshot.items():
            self.examples[name] = load_items(fs.examples, display=study.rel(fs.examples))
            self.answer_templates[name] = (
                _read_template(fs.answer, study.rel(fs.answer))
                if fs.answer
                else parse_template("{answer}", f"[fewshot.{name}] answer")
            )
        self._images: dict[Path, tuple[str, str, int, int]] = {}
        self._varied: dict[tuple[str, str], Item] = {}
        # {steps.NAME} slot values per item, once the item steps are decided (docs/prompts.md §8)
        self.step_values: dict[str, dict[str, str]] = {}
        # docs/prompts.md §9: an answer-dependent arm's components are templates of {prior.*}
        self.component_templates = _component_templates(study, self.texts)
        self.prior_values: dict[str, dict[str, str]] = {}  # trial id -> {prior.*} values

    # ------------------------------------------------------------------ pieces

    def image_paths(self, stimulus: str) -> list[Path]:
        """The image files of a stimulus or item, in the order they are sent."""
        if self.items is None:
            return [self.study.stimuli[stimulus]]
        assert self.study.items_path is not None
        base = self.study.items_path.parent
        return [(base / rel).resolve() for rel in self.items.by_id[stimulus].images]

    def _image(self, path: Path) -> tuple[str, str, int, int]:
        """(media type, base64, width, height) of an image file, read and checked once."""
        if path not in self._images:
            raw = path.read_bytes()
            media, width, height = check_image_for_api(raw, name=f"image {self.study.rel(path)}")
            self._images[path] = (media, base64.b64encode(raw).decode("ascii"), width, height)
        return self._images[path]

    def _image_block(self, path: Path) -> dict[str, Any]:
        media, data, _, _ = self._image(path)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}

    def image_sizes(self, stimulus: str) -> list[tuple[int, int]]:
        """(width, height) of each image a stimulus's request carries, in order."""
        return [self._image(path)[2:] for path in self.image_paths(stimulus)]

    def values(self, item: Item, *, answers: bool = False) -> dict[str, str]:
        """The slot values of ``item``."""
        return item_values(item, self.option_format, self.separator, answers=answers)

    def varied_item(self, stimulus: str, variant: str | None) -> Item:
        """The item of a trial: as written, or as its variant makes it (``docs/variants.md``)."""
        assert self.items is not None
        item = self.items.by_id[stimulus]
        if variant is None:
            return item
        key = (stimulus, variant)
        cached = self._varied.get(key)
        if cached is None:
            from runner._variants import apply

            cached = apply(self.study.variant(variant), item)
            self._varied[key] = cached
        return cached

    def item_templates(self) -> list[Template]:
        """``[prompt] item`` and every factor level's template: all an item block may use."""
        return ([self.item_template] if self.item_template is not None else []) + list(
            self.level_templates.values()
        )

    def template_of(self, arm: str | None) -> Template | None:
        """The item template of an arm: a factor level's ``template``, else ``[prompt] item``."""
        if arm is None or not self.study.arms[arm].factors:
            return self.item_template
        path = self.study.arm_template(arm)
        if path is not None and path in self.level_templates:
            return self.level_templates[path]
        return self.item_template

    def edited_item(self, arm: str | None, stimulus: str, variant: str | None = None) -> Item:
        """The item of a trial: varied (``docs/variants.md``), then the arm's factor edits.

        Raises :class:`runner._factors.FactorError` naming item, factor and level when an edit
        names a field the item lacks.
        """
        item = self.varied_item(stimulus, variant)
        edits = self.study.arm_item_edits(arm) if arm is not None else []
        if not edits:
            return item
        assert arm is not None
        key = (arm, stimulus, variant)
        cached = self._edited.get(key)
        if cached is None:
            from runner._factors import apply_edits

            cached = Item(item.id, apply_edits(item.data, edits, item.id), item.line)
            self._edited[key] = cached
        return cached

    def item_block(
        self, stimulus: str, variant: str | None = None, arm: str | None = None
    ) -> str | None:
        """The item template rendered for a stimulus, trailing newlines removed (None: none).

        ``arm``: a factorial cell's template and item edits apply (``docs/prompts.md`` §3).
        """
        template = self.template_of(arm)
        if template is None:
            return None
        if self.items is not None:
            item = self.edited_item(arm, stimulus, variant)
            values = self.values(item)
            values.update(self.step_values.get(stimulus, {}))
        else:
            values = {"id": stimulus}
        return template.render(values).rstrip("\n")

    def example_texts(self, arm: str, stimulus: str) -> list[tuple[str, str]]:
        """(user text, answer text) of each example the arm shows for a stimulus."""
        name = self.study.arms[arm].fewshot
        template = self.template_of(arm)
        if name is None or self.items is None or template is None:
            return []
        spec = self.study.fewshot[name]
        drawn = draw_examples(spec, self.examples[name], self.items.by_id[stimulus])
        answer = self.answer_templates[name]
        return [
            (
                template.render(self.values(e)).rstrip("\n"),
                answer.render(self.values(e, answers=True)).rstrip("\n"),
            )
            for e in drawn
        ]

    def arm_text(
        self,
        arm: str,
        stimulus: str,
        examples: Sequence[tuple[str, str]],
        variant: str | None = None,
        prior: Mapping[str, str] | None = None,
    ) -> str:
        """The trial's user text (section 3): components, item block and inline examples.

        ``prior``: the ``{prior.*}`` values of an answer-dependent arm's trial (section 9).
        """
        spec = self.study.arms[arm]
        inline = spec.fewshot is not None and self.study.fewshot[spec.fewshot].style == "inline"
        block = self.item_block(stimulus, variant, arm)
        parts: list[str] = []
        for name in self.study.placed_components(arm):
            if name == "item":
                if block is not None:
                    parts.append(block)
            elif name == "examples":
                if inline:
                    parts.append("\n\n".join(f"{u}\n{a}" for u, a in examples))
            elif spec.after is not None:
                parts.append(self.component_templates[name].render(prior or {}).rstrip("\n"))
            else:
                parts.append(self.texts[name].rstrip("\n"))
        return "\n\n".join(parts) + "\n" if parts else ""

    def system_prompt(self, arm: str) -> str | None:
        """The arm's system prompt, or None."""
        names = self.study.arms[arm].system
        if not names:
            return None
        return "\n\n".join(self.texts[n].rstrip("\n") for n in names)

    # ------------------------------------------------------------------ the request

    def body(
        self,
        arm: str,
        model: str | None,
        stimulus: str,
        variant: str | None = None,
        prior: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The Messages API request object of a trial (``docs/prompts.md`` section 6).

        ``variant``: the trial's variant, applied to the item before the template
        (``docs/variants.md`` section 4).
        """
        spec = self.study.arms[arm]
        examples = self.example_texts(arm, stimulus)
        content: list[dict[str, Any]] = [self._image_block(p) for p in self.image_paths(stimulus)]
        text = self.arm_text(arm, stimulus, examples, variant, prior)
        if text:
            content.append({"type": "text", "text": text})
        messages: list[dict[str, Any]] = []
        if spec.fewshot is not None and self.study.fewshot[spec.fewshot].style == "turns":
            for user, answer in examples:
                messages.append({"role": "user", "content": [{"type": "text", "text": user}]})
                messages.append(
                    {"role": "assistant", "content": [{"type": "text", "text": answer}]}
                )
        messages.append({"role": "user", "content": content})
        chosen = self.models[model]
        body: dict[str, Any] = {
            "model": chosen.id,
            **request_parameters(chosen, spec.sampling),
            "messages": messages,
        }
        system = self.system_prompt(arm)
        if system is not None:
            body["system"] = system
        return body

    # ------------------------------------------------------------------ lock checks

    def problems(self) -> list[str]:
        """Everything that stops a lock in the prompts: slots, draws, overlaps, images."""
        out = self._slot_problems() + self._level_template_problems()
        if out:
            return out
        if self.study.factorial is not None:
            out += self.factor_problems()
            if out:
                return out
        if self.item_template is not None:
            pool = list(self.items) if self.items is not None else []
            varied, variant_problems = self._varied_pool()
            out += variant_problems
            if variant_problems:
                return out
            out += self._unfilled(self.item_template, varied or pool, answers=False)
        for name, examples in self.examples.items():
            out += self._fewshot_problems(name, examples)
        if self.items is not None:
            out += self._images_ok()
        for arm in self.study.arms.values():
            out += self._arm_problems(arm)
        return out

    def _slot_problems(self) -> list[str]:
        """The item template may not show the key; the option format takes label and text."""
        out: list[str] = []
        if self.item_template is not None:
            for slot in self.item_template.slots():
                if slot.name in ANSWER_SLOTS:
                    out.append(
                        f"{self.item_template.name}:{slot.line}:{slot.column}: slot "
                        f"{{{slot.name}}} would show the test item's key to the model; it is "
                        "for few-shot answer templates only"
                    )
        for slot in self.option_format.slots():
            if slot.name not in ("label", "text"):
                out.append(
                    f"[prompt] option_format: slot {{{slot.name}}}: only {{label}} and "
                    "{text} may be used"
                )
        return out

    def _fewshot_problems(self, name: str, examples: ItemSet) -> list[str]:
        """An example set: its templates fill, it shares no item, and every draw succeeds."""
        study = self.study
        where = f"[fewshot.{name}]"
        out: list[str] = []
        if self.item_template is not None:
            out += self._unfilled(self.item_template, list(examples), answers=False)
        out += self._unfilled(self.answer_templates[name], list(examples), answers=True)
        out += self._overlap(name, examples)
        if self.items is None:
            out.append(f"{where}: few-shot examples need an item file ([stimuli] items)")
            return out
        if not any(a.fewshot == name for a in study.arms.values()):
            return out
        spec = study.fewshot[name]
        for item in self.items:
            try:
                draw_examples(spec, examples, item)
            except ValueError as exc:
                out.append(f"{where}: {exc}")
                break
        return out

    def _arm_problems(self, arm: Arm) -> list[str]:
        """An arm's subset, the components it names, and (section 9) its first stage."""
        study = self.study
        out: list[str] = []
        if arm.subset is not None:
            total = len(study.stimulus_ids())
            if arm.subset[0] > total:
                out.append(
                    f"{study.spec_path}: arms.{arm.id}.items.n: {arm.subset[0]} items "
                    f"asked for, the study has {total}"
                )
        if self.item_template is None and "item" in arm.components:
            out.append(
                f"{study.spec_path}: arms.{arm.id}.components: 'item' needs an item "
                "template ([prompt] item)"
            )
        if arm.after is not None:
            out += self._after_problems(arm.id)
        if arm.fewshot is None and "examples" in arm.components:
            out.append(
                f"{study.spec_path}: arms.{arm.id}.components: 'examples' needs "
                'an example set (fewshot = "NAME")'
            )
        return out

    def _level_template_problems(self) -> list[str]:
        """A level's item template may not show the key (answer slots), as ``[prompt] item``."""
        out: list[str] = []
        for template in self.level_templates.values():
            for slot in template.slots():
                if slot.name in ANSWER_SLOTS:
                    out.append(
                        f"{template.name}:{slot.line}:{slot.column}: slot {{{slot.name}}} "
                        "would show the test item's key to the model; it is for few-shot "
                        "answer templates only"
                    )
        return out

    def factor_problems(self) -> list[str]:
        """The factorial cells at lock (``docs/study-spec.md``, "Factors").

        Every edit of every cell applies to every item the cell runs (a field the item lacks
        is refused naming item, factor and level); every cell's template fills for its edited
        items; and every non-reference level changes every item's request against the
        reference level (alone, the other factors at their reference): a level that leaves it
        unchanged would be a silent null arm, refused naming item, factor and level.
        """
        study = self.study
        fx = study.factorial
        assert fx is not None
        out: list[str] = []
        for arm in study.arms.values():
            if arm.factors:
                out += self._cell_problems(arm)
        if out:
            return list(dict.fromkeys(out))
        for factor_name in fx.factors:
            factor = study.factors[factor_name]
            for lv in factor.levels[1:]:
                if factor.scope == "prompt":
                    out += self._empty_level(factor, lv)
                else:
                    out += self._unchanged_items(factor, lv)
        return out

    def _items_name(self) -> str:
        study = self.study
        return study.rel(study.items_path) if study.items_path is not None else "items"

    def _cell_problems(self, arm: Arm) -> list[str]:
        """A factorial cell: its edits apply to its items, and its template fills for them."""
        from runner._factors import FactorError
        from runner._schedule import subset

        stims = self.study.stimulus_ids()
        items = stims if arm.subset is None else subset(arm.subset[1], stims, arm.subset[0])
        template = self.template_of(arm.id)
        out: list[str] = []
        edited: list[Item] = []
        for item_id in items if self.items is not None else ():
            try:
                edited.append(self.edited_item(arm.id, item_id))
            except FactorError as exc:
                line = self.items.by_id[item_id].line if self.items is not None else 0
                out.append(f"{self._items_name()}:{line}: {exc} (arm {arm.id})")
                break
        if template is not None and edited:
            out += self._unfilled(template, edited, answers=False)
        return out

    def _empty_level(self, factor: Factor, lv: Level) -> list[str]:
        """A prompt factor's level whose components are all empty is a silent null arm."""
        texts = [self.texts[n].strip() for n in (*lv.components, *lv.system)]
        if any(texts):
            return []
        return [
            f"{self.study.spec_path}: factors.{factor.name}.levels.{lv.name}: "
            "its components are empty, so it leaves every request "
            "unchanged (a silent null arm)"
        ]

    def _unchanged_items(self, factor: Factor, lv: Level) -> list[str]:
        """The items an item factor's level leaves unchanged against the reference level."""
        from runner._factors import FactorError, apply_edits

        ref_tpl = self.item_template
        tpl = self.level_templates.get(lv.template) if lv.template else ref_tpl
        out: list[str] = []
        for item in self.items or ():
            edits = [(factor.name, lv.name, e) for e in lv.edits]
            try:
                data = apply_edits(item.data, edits, item.id)
            except FactorError:
                continue  # reported above for the cells that run it
            if ref_tpl is None or tpl is None:
                continue
            changed = Item(item.id, data, item.line)
            try:
                same = tpl.render(self._filled(tpl, changed)) == ref_tpl.render(
                    self._filled(ref_tpl, item)
                )
            except KeyError:
                continue  # an unfilled slot: reported by the cells' checks
            if same:
                out.append(
                    f"{self._items_name()}:{item.line}: item {item.id!r}: factor "
                    f"{factor.name!r} level {lv.name!r} leaves the item's "
                    "request unchanged (a silent null arm)"
                )
        return out

    def _filled(self, template: Template, item: Item) -> dict[str, str]:
        """``item``'s slot values, each ``{steps.*}`` slot of ``template`` filled with ``""``."""
        values = self.values(item)
        values.update({s.name: "" for s in template.slots() if s.name.startswith("steps.")})
        return values

    def _after_problems(self, arm: str) -> list[str]:
        """An answer-dependent arm (section 9): its prior trials, slots and answer step."""
        study = self.study
        spec = study.arms[arm]
        assert spec.after is not None
        where = f"{study.spec_path}: arms.{arm}.after"
        out = self._missing_prior(arm, spec.after["arm"], where)
        answer = spec.after.get("answer")
        if answer is not None:
            step = study.steps.get(answer)
            if step is None or step.on != "trial":
                out.append(
                    f"{where}.answer: {answer!r} is no trial step ([steps.<NAME>] with "
                    'on = "trial")'
                )
        allowed = {"prior.response"}
        if answer is not None:
            allowed |= {"prior.answer"}
        if spec.after.get("rule") == "next-option":
            allowed |= {"prior.answer_text", "prior.other", "prior.other_text"}
            lacking = next((i for i in self.items or () if not i.options), None)
            if lacking is not None:
                out.append(f"{where}.rule: next-option needs options; item {lacking.id!r} has none")
        out += self._prior_slot_problems(arm, allowed)
        return out

    def _missing_prior(self, arm: str, first: str, where: str) -> list[str]:
        """The first trial of ``arm`` whose first-stage trial (of arm ``first``) is missing."""
        study = self.study
        ids = set(study.trial_ids())
        for tid in study.trial_ids():
            if tid.split("|", 1)[0] != arm:
                continue
            prior = prior_trial(tid, first)
            if prior not in ids:
                return [
                    f"{where}: trial {tid} has no first-stage trial {prior} (the "
                    "prior arm must run the same models, items and replicates)"
                ]
        return []

    def _prior_slot_problems(self, arm: str, allowed: set[str]) -> list[str]:
        """The ``{prior.*}`` slots an answer-dependent arm's components may not use."""
        out: list[str] = []
        for name in self.study.arms[arm].components:
            tpl = self.component_templates.get(name)
            if tpl is None:
                continue
            for slot in tpl.slots():
                if slot.name not in allowed:
                    out.append(
                        f"{tpl.name}:{slot.line}:{slot.column}: slot {{{slot.name}}}: an "
                        f"answer-dependent arm's components may use only "
                        f"{', '.join('{' + a + '}' for a in sorted(allowed))} (arms."
                        f"{arm}; section 9)"
                    )
        return out

    def _varied_pool(self) -> tuple[list[Item], list[str]]:
        """Every (item, variant) of the schedule applied, and every variant that cannot apply.

        Each problem names the item file and line, the item and the variant
        (``docs/variants.md``); a variant that fails on many items is reported for the first
        three.
        """
        from runner._variants import VariantError

        study = self.study
        if not study.variants or self.items is None:
            return [], []
        try:
            study.variant_list()
        except VariantError as exc:
            return [], [f"{study.spec_path}: {exc}"]
        problems = self._variant_problems()
        if problems:
            return [], [p for found in problems.values() for p in found]
        return self._vary_all(problems)

    def _vary_all(self, problems: dict[str, list[str]]) -> tuple[list[Item], list[str]]:
        """Apply every variant of every arm to every item it runs (see :meth:`_varied_pool`)."""
        from runner._schedule import subset
        from runner._variants import VariantError

        study = self.study
        assert self.items is not None
        pool: dict[tuple[str, str], Item] = {}
        stims = [i.id for i in self.items]
        for arm in study.arms.values():
            items = stims if arm.subset is None else subset(arm.subset[1], stims, arm.subset[0])
            for variant in study.arm_variants(arm.id):
                for item_id in items:
                    if (item_id, variant.name) in pool:
                        continue
                    try:
                        pool[(item_id, variant.name)] = self.varied_item(item_id, variant.name)
                    except VariantError as exc:
                        self._variant_failed(problems.setdefault(variant.name, []), item_id, exc)
        out = [p for found in problems.values() for p in found]
        return list(pool.values()), out

    def _variant_failed(self, found: list[str], item_id: str, exc: Exception) -> None:
        """Note a variant that cannot apply to an item (its first three distinct failures)."""
        assert self.items is not None
        item = self.items.by_id[item_id]
        if len(found) < 3 and not any(f.endswith(str(exc)) for f in found):
            found.append(f"{self._items_name()}:{item.line}: {exc}")

    def _variant_problems(self) -> dict[str, list[str]]:
        """Variants an arm names that the study lacks; drop-field variants of placed fields."""
        study = self.study
        problems: dict[str, list[str]] = {}
        every = study.variant_list()
        for arm in study.arms.values():
            for listed in arm.variants or ():
                if not any(v.name == listed or v.declared == listed for v in every):
                    problems.setdefault(listed, []).append(
                        f"{study.spec_path}: arms.{arm.id}.variants: {listed!r} is not a "
                        f"variant of the study (its variants: {', '.join(v.name for v in every)})"
                    )
        template = self.item_template
        slots = {s.name: s for s in template.slots()} if template else {}
        for variant in every:
            dropped = variant.spec.params.get("field")
            if variant.spec.kind == "drop-field" and dropped in slots:
                slot = slots[str(dropped)]
                problems.setdefault(variant.name, []).append(
                    f"{template.name if template else ''}:{slot.line}:"
                    f"{slot.column}: slot {{{dropped}}}: variant {variant.name!r} (drop-field) "
                    f"removes the field {dropped!r} that the item template places"
                )
        return problems

    def _unfilled(self, template: Template, items: Sequence[Item], *, answers: bool) -> list[str]:
        """For each slot some item cannot fill, a problem naming the first such item."""
        slots = template.slots()
        if self.study.steps:  # step slots are checked by runner.steps._render
            slots = [s for s in slots if not s.name.startswith("steps.")]
        lacking: dict[int, Item] = {}  # slot index -> the first item that lacks it
        for item in items:
            values = self.values(item, answers=answers)
            for index, slot in enumerate(slots):
                if index not in lacking and slot.name not in values:
                    lacking[index] = item
            if len(lacking) == len(slots):
                break
        return [
            f"{template.name}:{slots[i].line}:{slots[i].column}: slot {{{slots[i].name}}}: item "
            f"{lacking[i].id!r} has no such field{_hint(slots[i].name, lacking[i])}"
            for i in sorted(lacking)
        ]

    def _overlap(self, name: str, examples: ItemSet) -> list[str]:
        if self.items is None:
            return []
        questions = {
            i.text_fields().get("question", "").strip(): i.id
            for i in self.items
            if i.text_fields().get("question", "").strip()
        }
        out: list[str] = []
        for e in examples:
            if e.id in self.items.by_id:
                out.append(
                    f"[fewshot.{name}] {examples.path.name}:{e.line}: example {e.id!r} "
                    "is also a test item (the model would see a test answer)"
                )
                continue
            question = e.text_fields().get("question", "").strip()
            if question and question in questions:
                out.append(
                    f"[fewshot.{name}] {examples.path.name}:{e.line}: example {e.id!r} has the "
                    f"same question as test item {questions[question]!r} (the model would see "
                    "a test answer)"
                )
        return out

    def _images_ok(self) -> list[str]:
        out: list[str] = []
        root = self.study.root.resolve()
        for item in self.items or ():
            for path in self.image_paths(item.id):
                try:
                    path.relative_to(root)
                except ValueError:
                    out.append(
                        f"{self.study.rel(self.study.items_path or root)}:{item.line}: "
                        f"image {str(path)!r} is outside the study folder"
                    )
                    continue
                try:
                    self._image_block(path)
                except OSError as exc:
                    out.append(
                        f"{self.study.rel(self.study.items_path or root)}:{item.line}: "
                        f"image {self.study.rel(path)}: {exc.strerror}"
                    )
                except StimulusError as exc:
                    out.append(str(exc))
        return out


def prior_trial(trial_id: str, prior_arm: str) -> str:
    """The first-stage trial of an answer-dependent trial: the same id under ``prior_arm``."""
    return prior_arm + "|" + trial_id.split("|", 1)[1]


def _hint(slot: str, item: Item) -> str:
    match = _OPTION_SLOT.match(slot)
    if match and item.options:
        return f" (its options are {', '.join(item.labels)})"
    if slot in ANSWER_SLOTS:
        return ""
    if slot.startswith("metadata."):
        return " (only string metadata values and arrays of strings fill a slot)"
    return ""
