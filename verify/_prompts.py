"""Requests re-rendered from ``docs/prompts.md`` alone: templates, few-shot draws, models, schedule.

The verifier's own implementation of the page (it imports nothing from ``runner/``):

* §2 templates: :func:`parse_template` (``{{``/``}}`` escapes, ``{NAME}`` slots, any other
  brace an error naming the file, line and column) and :meth:`Template.render`;
* §3 the prompt of a trial: the item block, the arm text, the system prompt, the user content;
* §4 few-shot examples: the random order, the five rules, the three orders, turns and inline;
* §5 models and sampling parameters: the per-arm overrides and the ranges per provider;
* §6 the Messages request object and its ``openai-compatible`` wire form;
* §7 the trial ids with models, per-arm replicates and seeded subsets.

:class:`LockedStudy` puts them together from a ``protocol.locked`` body and the locked files'
bytes (by study-relative path), so every request of a study can be rendered again and
compared byte for byte (:meth:`LockedStudy.request_bytes`) with the one the ledger recorded.
The ``protocol.locked`` members read are listed at the end of ``docs/prompts.md`` §7.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verify._canonical import CanonicalError, canonical_json
from verify._factorial import FactorialError, Factors, expansion_problems
from verify._items import Item, ItemError, ItemFile, item_format, read_items, resolve_image
from verify._variants import VariantError, Variants

__all__ = [
    "ANSWER_SLOTS",
    "DEFAULT_ANSWER_TEMPLATE",
    "DEFAULT_OPTION_FORMAT",
    "DEFAULT_OPTION_SEPARATOR",
    "MAX_DRAW_HASHES",
    "ORDERS",
    "RESERVED_COMPONENTS",
    "RULES",
    "STYLES",
    "Arm",
    "FewShot",
    "LockedStudy",
    "PromptError",
    "Slot",
    "Template",
    "draw",
    "execution_order",
    "image_block",
    "item_values",
    "media_type",
    "messages_request",
    "openai_request",
    "option_format_template",
    "parameter_problems",
    "parse_template",
    "parse_trial_id",
    "random_order",
    "read_template",
    "sampling_parameters",
    "schedule_bytes",
    "subset",
    "trial_id",
]

DEFAULT_OPTION_FORMAT = "{label}. {text}"
"""§2: the default ``[prompt] option_format``."""
DEFAULT_OPTION_SEPARATOR = "\n"
"""§2: the default ``[prompt] option_separator``."""
DEFAULT_ANSWER_TEMPLATE = "{answer}"
"""§4: the default answer template."""
ANSWER_SLOTS = ("answer", "answer_text", "rationale")
"""§2: slots of answer templates only, refused in the item template."""
RULES = ("fixed", "random", "label-balanced", "same-metadata", "distinct-metadata")
"""§4: the few-shot rules."""
ORDERS = ("drawn", "id", "reverse")
"""§4: the few-shot orders."""
STYLES = ("turns", "inline")
"""§4: the few-shot styles."""
RESERVED_COMPONENTS = ("item", "examples")
"""§3: component names that stand for the item block and the inline examples block."""

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+){0,2})\}")
_BRACE = re.compile(r"[{}]")
_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DECIMAL = re.compile(r"[0-9]+")


MAX_DRAW_HASHES = 100_000_000
"""The most few-shot order hashes (examples x test items, per example set) the verifier computes.

Each draw hashes every example of its set once per test item (§4); a hostile protocol could
otherwise ask for 10^12 of them. An honest study of 1,000 examples and 10,000 items needs 10^7.
"""


class PromptError(ValueError):
    """A locked prompt, template, example set, model or design cannot be rendered as §2-§7 say."""


# ------------------------------------------------------------------------------ §2 templates


@dataclass(frozen=True)
class Slot:
    """A slot ``{name}`` of a template and where it stands (1-based line and column)."""

    name: str
    line: int
    column: int


@dataclass(frozen=True)
class Template:
    """A parsed template: ``name`` (its file, for messages) and its literal texts and slots."""

    name: str
    parts: tuple[str | Slot, ...]

    @property
    def slots(self) -> tuple[Slot, ...]:
        """The slots in order."""
        return tuple(p for p in self.parts if isinstance(p, Slot))

    def render(self, values: Mapping[str, str], item: str) -> str:
        """Substitute every slot by its value, verbatim; ``item`` names who fills it.

        A slot without a value is a :class:`PromptError` naming the template, the slot and
        ``item``.
        """
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = values.get(part.name)
            if value is None:
                raise PromptError(
                    f"{self.name}:{part.line}:{part.column}: slot {{{part.name}}} cannot be "
                    f"filled for {item}"
                )
            out.append(value)
        return "".join(out)


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def parse_template(text: str, name: str) -> Template:
    """Parse template ``text`` (§2); ``name`` (the file) is named in every error.

    ``{{`` is a literal ``{``, ``}}`` a literal ``}``, ``{NAME}`` a slot; any other brace is a
    :class:`PromptError` naming the file, line and column (``name:line:column``).
    """
    parts: list[str | Slot] = []
    literal: list[str] = []
    index = 0
    for match in _BRACE.finditer(text):
        at = match.start()
        if at < index:
            continue  # the second brace of an escape or the closing brace of a slot
        literal.append(text[index:at])
        if text.startswith("{{", at):
            literal.append("{")
            index = at + 2
        elif text.startswith("}}", at):
            literal.append("}")
            index = at + 2
        elif text[at] == "{" and (slot := _SLOT.match(text, at)) is not None:
            if "".join(literal):
                parts.append("".join(literal))
            literal = []
            parts.append(Slot(slot.group(1), *_position(text, at)))
            index = slot.end()
        else:
            line, column = _position(text, at)
            what = (
                "'{' starts no slot {NAME} (write '{{' for a literal '{')"
                if text[at] == "{"
                else "'}' closes no slot (write '}}' for a literal '}')"
            )
            raise PromptError(f"{name}:{line}:{column}: {what}")
    literal.append(text[index:])
    if "".join(literal):
        parts.append("".join(literal))
    return Template(name, tuple(parts))


def read_template(data: bytes, name: str) -> Template:
    """Parse the template file ``name`` from its bytes (UTF-8)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _position(data[: exc.start].decode("utf-8", "replace"), exc.start)
        raise PromptError(f"{name}:{line}:{column}: not UTF-8") from None
    return parse_template(text, name)


def option_format_template(text: str, name: str = "[prompt] option_format") -> Template:
    """``[prompt] option_format``: a template whose only slots are ``{label}`` and ``{text}``."""
    template = parse_template(text, name)
    for slot in template.slots:
        if slot.name not in ("label", "text"):
            raise PromptError(
                f"{name}:{slot.line}:{slot.column}: slot {{{slot.name}}}: the only slots of "
                "an option format are {label} and {text}"
            )
    return template


def item_values(
    fields: Mapping[str, Any],
    option_format: Template,
    separator: str,
    *,
    answer: bool = False,
) -> dict[str, str]:
    """The slot values an item fills (§2), from its canonical-form object ``fields``.

    ``answer`` adds the answer-template slots ``{answer}``, ``{answer_text}`` (when the answer
    is an option label) and ``{rationale}``.
    """
    values: dict[str, str] = {}
    for name, value in fields.items():
        if name in ("options", "images", "metadata"):
            continue
        if name in ("answer", "rationale") and not answer:
            continue
        if isinstance(value, str):
            values[name] = value
    options = fields.get("options")
    if isinstance(options, list) and options:
        _option_values(fields, options, option_format, separator, answer, values)
    metadata = fields.get("metadata")
    if isinstance(metadata, dict):
        for key, value in metadata.items():
            if isinstance(value, str):
                values[f"metadata.{key}"] = value
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                values[f"metadata.{key}"] = json.dumps(
                    value, ensure_ascii=False, separators=(",", ":")
                )
    return values


def _option_values(
    fields: Mapping[str, Any],
    options: list[Any],
    option_format: Template,
    separator: str,
    answer: bool,
    values: dict[str, str],
) -> None:
    """§2: ``{options}``, each ``{option_X}`` and (with ``answer``) ``{answer_text}``."""
    item = f"item {fields.get('id')!r}"
    rendered: list[str] = []
    for label, text in zip(_LABELS, options, strict=False):
        rendered.append(option_format.render({"label": label, "text": str(text)}, item))
        values[f"option_{label}"] = str(text)
    values["options"] = separator.join(rendered)
    if answer:
        labels = _LABELS[: len(options)]
        given = fields.get("answer")
        if isinstance(given, str) and len(given) == 1 and given in labels:
            values["answer_text"] = str(options[labels.index(given)])


def _refuse_answer_slots(template: Template) -> None:
    for slot in template.slots:
        if slot.name in ANSWER_SLOTS:
            raise PromptError(
                f"{template.name}:{slot.line}:{slot.column}: slot {{{slot.name}}} is refused "
                "in the item template (the test item's key must never reach the model)"
            )


# ------------------------------------------------------------------------------ §4 few-shot


@dataclass(frozen=True, eq=False)
class FewShot:
    """A locked example set (``[fewshot.NAME]``) with its examples and answer template."""

    name: str
    examples: ItemFile
    rule: str
    count: int
    ids: tuple[str, ...] = ()
    seed: str | None = None
    field: str | None = None
    order: str = "drawn"
    style: str = "turns"
    answer: Template = Template("the default answer template", (Slot("answer", 1, 1),))


def random_order(seed: str, item_id: str, examples: Iterable[Item]) -> list[Item]:
    """§4: the examples by ascending ``SHA-256("{seed}|{item id}|{example id}")``."""
    return sorted(
        examples,
        key=lambda e: hashlib.sha256(f"{seed}|{item_id}|{e.id}".encode()).hexdigest(),
    )


def draw(fs: FewShot, item_id: str, metadata: Mapping[str, Any] | None = None) -> list[Item]:
    """The examples ``fs`` draws for test item ``item_id`` (whose metadata is ``metadata``).

    In the set's ``order``. Fewer than ``count`` examples is a :class:`PromptError` naming the
    item.
    """
    examples = fs.examples.items
    chosen: list[Item]
    if fs.rule == "fixed":
        by_id = fs.examples.by_id()
        chosen = [by_id[i] for i in fs.ids if i in by_id]
    else:
        order = random_order(str(fs.seed), item_id, examples)
        if fs.rule == "random":
            chosen = order[: fs.count]
        elif fs.rule == "label-balanced":
            labels = sorted({e.answer for e in order})
            queues = {label: [e for e in order if e.answer == label] for label in labels}
            chosen = []
            while len(chosen) < fs.count and any(queues.values()):
                for label in labels:
                    if len(chosen) == fs.count:
                        break
                    if queues[label]:
                        chosen.append(queues[label].pop(0))
        elif fs.rule == "same-metadata":
            want = (metadata or {}).get(str(fs.field))
            chosen = [
                e for e in order if isinstance(want, str) and e.metadata.get(str(fs.field)) == want
            ][: fs.count]
        elif fs.rule == "distinct-metadata":
            chosen, seen = [], set()
            for e in order:
                value = e.metadata.get(str(fs.field))
                if isinstance(value, str) and value not in seen:
                    chosen.append(e)
                    seen.add(value)
                    if len(chosen) == fs.count:
                        break
        else:
            raise PromptError(f"[fewshot.{fs.name}] rule {fs.rule!r} is not one of {RULES}")
    if len(chosen) < fs.count:
        raise PromptError(
            f"[fewshot.{fs.name}]: the {fs.rule} draw for item {item_id!r} finds "
            f"{len(chosen)} of {fs.count} examples"
        )
    if fs.order == "id":
        chosen = sorted(chosen, key=lambda e: e.id)
    elif fs.order == "reverse":
        chosen = chosen[::-1]
    return chosen


def leak_problems(fs: FewShot, test_items: Iterable[Mapping[str, Any]]) -> list[str]:
    """§4: examples whose id is a test item's id or whose question is a test item's question."""
    ids: set[str] = set()
    questions: dict[str, str] = {}
    for fields in test_items:
        ids.add(str(fields.get("id")))
        question = fields.get("question")
        if isinstance(question, str):
            questions.setdefault(question.strip(), str(fields.get("id")))
    problems: list[str] = []
    for e in fs.examples.items:
        where = f"[fewshot.{fs.name}] {fs.examples.path} line {e.line}"
        if e.id in ids:
            problems.append(f"{where}: example {e.id!r} has the id of a test item")
        elif e.question is not None and e.question.strip() in questions:
            problems.append(
                f"{where}: example {e.id!r} asks the question of test item "
                f"{questions[e.question.strip()]!r}"
            )
    return problems


# ------------------------------------------------------------------------------ §5 parameters


PARAMETERS = ("max_tokens", "temperature", "top_p", "top_k", "stop")
"""§5: the sampling parameters (``[model]``, ``[models.NAME]``, ``[arms.X] sampling``)."""

_TEMPERATURE_MAX = {"anthropic": 1, "openai": 2, "openai-compatible": 2}
_STOP_MAX = {"anthropic": 8, "openai": 4, "openai-compatible": 4}


def sampling_parameters(
    model: Mapping[str, Any], sampling: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The model's table with the arm's ``sampling`` overrides applied (§5)."""
    params = dict(model)
    for name, value in (sampling or {}).items():
        if name not in PARAMETERS:
            raise PromptError(f"sampling: {name!r} is not one of {', '.join(PARAMETERS)}")
        params[name] = value
    return params


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def parameter_problems(where: str, params: Mapping[str, Any]) -> list[str]:
    """The §5 range problems of one model's effective parameters, each naming ``where``."""
    provider = params.get("provider")
    problems: list[str] = []

    def bad(name: str, what: str) -> None:
        problems.append(f"{where} {name}: {params.get(name)!r} {what}")

    if type(params.get("id")) is not str or params.get("id") == "":
        bad("id", "is not a non-empty model id")
    max_tokens = params.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        bad("max_tokens", "is not an integer >= 1")
    temperature: Any = params.get("temperature")
    if not _number(temperature):
        bad("temperature", "is not a number")
    elif provider in _TEMPERATURE_MAX and not 0 <= temperature <= _TEMPERATURE_MAX[provider]:
        bad("temperature", f"is outside 0 to {_TEMPERATURE_MAX[provider]} ({provider})")
    top_p = params.get("top_p")
    if top_p is not None and (not _number(top_p) or not 0 <= top_p <= 1):
        bad("top_p", "is not a number from 0 to 1")
    top_k = params.get("top_k")
    if top_k is not None:
        if provider == "openai":
            bad("top_k", "is refused by the openai backend")
        elif type(top_k) is not int or top_k < 1:
            bad("top_k", "is not an integer >= 1")
    stop = params.get("stop")
    if stop is not None:
        most = _STOP_MAX.get(str(provider))
        least = 1 if provider == "anthropic" else 0
        if type(stop) is not list or any(type(s) is not str or s == "" for s in stop):
            bad("stop", "is not a list of non-empty strings")
        elif most is not None and not least <= len(stop) <= most:
            bad("stop", f"must hold {least} to {most} strings ({provider})")
    logprobs = params.get("logprobs")
    if logprobs is not None:
        if provider not in ("openai", "openai-compatible"):
            bad("logprobs", f"cannot be returned by provider {provider!r}")
        elif type(logprobs) is not int or not 1 <= logprobs <= 20:
            bad("logprobs", "is not an integer from 1 to 20")
    return problems


# ------------------------------------------------------------------------------ §6 requests


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def media_type(data: bytes) -> str | None:
    """The media type of an image's magic bytes (PNG, JPEG, GIF, WebP), or ``None``."""
    for magic, media in _MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_block(data: bytes, name: str) -> dict[str, Any]:
    """A Messages API image block of ``data`` (standard padded base64; media type by magic)."""
    media = media_type(data)
    if media is None:
        raise PromptError(f"{name} is not a PNG, JPEG, GIF or WebP image")
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": media,
            "data": base64.b64encode(data).decode("ascii"),
        },
    }


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def messages_request(
    params: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    system: str | None = None,
) -> dict[str, Any]:
    """§6: the Messages API request object of ``messages`` under ``params`` (and ``system``)."""
    request: dict[str, Any] = {
        "max_tokens": params.get("max_tokens"),
        "messages": [dict(m) for m in messages],
        "model": params.get("id"),
        "temperature": params.get("temperature"),
    }
    if system is not None:
        request["system"] = system
    for name in ("top_p", "top_k"):
        if params.get(name) is not None:
            request[name] = params[name]
    if params.get("stop") is not None:
        request["stop_sequences"] = list(params["stop"])
    if params.get("logprobs") is not None:  # §5: a model that returns log-probabilities
        request["logprobs"] = True
        request["top_logprobs"] = params["logprobs"]
    return request


#: docs/backends.md: the form of the request body each backend sends and records. Backends not
#: named send the Messages request itself ("messages").
WIRE_FORMS = {
    "openai-compatible": "openai-compatible",
    "openai": "openai-compatible",
    "azure-openai": "openai-compatible",
    "gemini": "openai-compatible",
    "anthropic-bedrock": "bedrock",
    "anthropic-vertex": "vertex",
}
#: docs/backends.md: the ``anthropic_version`` a Bedrock or Vertex AI body carries (no ``model``).
ANTHROPIC_VERSIONS = {"bedrock": "bedrock-2023-05-31", "vertex": "vertex-2023-10-16"}


def wire_form(backend: object) -> str:
    """The wire form a ``trial.requested`` / ``step.requested`` event's backend sends."""
    return WIRE_FORMS.get(backend, "messages") if type(backend) is str else "messages"


def wire_request(request: Mapping[str, Any], wire: str) -> dict[str, Any]:
    """§6 and docs/backends.md: the body the backend of wire form ``wire`` sends for ``request``.

    ``openai-compatible``: the chat-completions object; ``bedrock`` and ``vertex``: the Messages
    request without ``model``, with that cloud's ``anthropic_version``; ``messages``: as is.
    """
    if wire == "openai-compatible":
        return openai_request(request)
    if wire in ANTHROPIC_VERSIONS:
        out = {k: v for k, v in request.items() if k != "model"}
        out["anthropic_version"] = ANTHROPIC_VERSIONS[wire]
        return out
    return dict(request)


def openai_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """§6: the chat-completions object the ``openai-compatible`` backend sends for ``request``."""
    messages: list[dict[str, Any]] = []
    if "system" in request:
        messages.append({"role": "system", "content": request["system"]})
    for message in request["messages"]:
        blocks = message["content"]
        if all(b.get("type") == "text" for b in blocks):
            content: Any = "".join(b["text"] for b in blocks)
        else:
            content = []
            for b in blocks:
                if b.get("type") == "text":
                    content.append({"type": "text", "text": b["text"]})
                else:
                    source = b["source"]
                    url = f"data:{source['media_type']};base64,{source['data']}"
                    content.append({"type": "image_url", "image_url": {"url": url}})
        messages.append({"role": message["role"], "content": content})
    out: dict[str, Any] = {"messages": messages}
    for name in ("model", "max_tokens", "temperature", "top_p", "top_k"):
        if name in request:
            out[name] = request[name]
    if "stop_sequences" in request:
        out["stop"] = request["stop_sequences"]
    for name in ("logprobs", "top_logprobs"):
        if name in request:
            out[name] = request[name]
    return out


# ------------------------------------------------------------------------------ §7 schedule


def trial_id(arm: str, model: str | None, item: str, rep: int, variant: str | None = None) -> str:
    """``arm|item|rep`` (a study with ``[model]``) or ``arm|model|item|rep`` (``[models]``).

    With a variant (``docs/variants.md`` §4): ``arm|model|item|variant|rep``, the model part
    empty for a ``[model]`` study.
    """
    if variant is not None:
        return f"{arm}|{model or ''}|{item}|{variant}|{rep}"
    return f"{arm}|{item}|{rep}" if model is None else f"{arm}|{model}|{item}|{rep}"


def trial_variant(tid: str) -> str | None:
    """The variant part of a five-part trial id (``docs/variants.md`` §4), else ``None``."""
    parts = tid.split("|")
    return parts[3] if len(parts) == 5 else None


def parse_trial_id(
    tid: str, multi_model: bool, variants: bool = False
) -> tuple[str, str | None, str, str]:
    """``(arm, model or None, item, rep)`` of a trial id; :class:`PromptError` if malformed.

    ``variants``: the study declares variants, so every id has five parts (its variant:
    :func:`trial_variant`); the model part is empty exactly when the study has one ``[model]``.
    """
    parts = tid.split("|")
    if variants:
        if len(parts) == 5 and (parts[1] != "") == multi_model and parts[3] and parts[2]:
            return parts[0], parts[1] or None, parts[2], parts[4]
        raise PromptError(
            f"trial id {tid!r} is not "
            f"{'arm|model|item|variant|rep' if multi_model else 'arm||item|variant|rep'}"
        )
    if multi_model and len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    if not multi_model and len(parts) == 3:
        return parts[0], None, parts[1], parts[2]
    raise PromptError(
        f"trial id {tid!r} is not {'arm|model|item|rep' if multi_model else 'arm|item|rep'}"
    )


def subset(item_ids: Sequence[str], n: int, seed: str) -> list[str]:
    """§7: the ``n`` items with the smallest ``SHA-256("{seed}|{item id}")``, in item order."""
    keyed = sorted(item_ids, key=lambda i: hashlib.sha256(f"{seed}|{i}".encode()).hexdigest())
    chosen = set(keyed[:n])
    return [i for i in item_ids if i in chosen]


def execution_order(ids: Iterable[str], seed: str) -> list[str]:
    """``docs/randomization.md``: the trial ids by ascending ``SHA-256("{seed}|{trial id}")``."""
    return sorted(ids, key=lambda t: hashlib.sha256(f"{seed}|{t}".encode()).hexdigest())


def schedule_bytes(ordered: Iterable[str]) -> bytes:
    """The schedule: each trial id followed by ``\\n``, UTF-8."""
    return "".join(t + "\n" for t in ordered).encode("utf-8")


# ------------------------------------------------------------------------------ the locked study


def _seed(value: Any, where: str) -> str:
    """A seed as written in decimal (a non-negative integer or a decimal string)."""
    if type(value) is int and value >= 0:
        return str(value)
    if type(value) is str and _DECIMAL.fullmatch(value):
        return value
    raise PromptError(f"{where}: {value!r} is not a non-negative integer seed")


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if type(value) is not list or any(type(v) is not str for v in value):
        raise PromptError(f"{where}: {value!r} is not a list of names")
    return tuple(value)


@dataclass(frozen=True)
class Arm:
    """One locked arm (``protocol.locked`` ``arms.X``) and what §3-§7 read of it."""

    name: str
    components: tuple[str, ...]
    system: tuple[str, ...] | None = None
    fewshot: str | None = None
    sampling: Mapping[str, Any] | None = None
    models: tuple[str, ...] | None = None
    replicates: int | None = None
    items: tuple[int, str] | None = None
    variants: tuple[str, ...] | None = None
    after: Mapping[str, str] | None = None  # §9: an answer-dependent arm
    factors: Mapping[str, str] | None = None  # a factorial cell (study-spec.md "Factors")
    response_from: str | None = None  # trials.md §6: a data arm (no request, no model)

    @classmethod
    def from_locked(cls, name: str, info: Any) -> Arm:
        """Read ``arms.<name>`` of ``protocol.locked``."""
        where = f"protocol.locked arms.{name}"
        if type(info) is not dict:
            raise PromptError(f"{where} is not an object")
        components = _string_list(info.get("components"), f"{where}.components")
        system = info.get("system")
        fewshot = info.get("fewshot")
        sampling = info.get("sampling")
        models = info.get("models")
        replicates = info.get("replicates")
        items = info.get("items")
        if fewshot is not None and type(fewshot) is not str:
            raise PromptError(f"{where}.fewshot: {fewshot!r} is not the name of an example set")
        if sampling is not None and type(sampling) is not dict:
            raise PromptError(f"{where}.sampling is not an object")
        if replicates is not None and (type(replicates) is not int or replicates < 1):
            raise PromptError(f"{where}.replicates: {replicates!r} is not an integer >= 1")
        subset_of: tuple[int, str] | None = None
        if items is not None:
            if type(items) is not dict or set(items) != {"n", "seed"}:
                raise PromptError(f"{where}.items is not an object {{n, seed}}")
            n = items["n"]
            if type(n) is not int or n < 1:
                raise PromptError(f"{where}.items.n: {n!r} is not an integer >= 1")
            subset_of = (n, _seed(items["seed"], f"{where}.items.seed"))
        variants = info.get("variants")
        after = info.get("after")
        if after is not None and (
            type(after) is not dict
            or type(after.get("arm")) is not str
            or not all(type(v) is str for v in after.values())
        ):
            raise PromptError(f"{where}.after is not an object {{arm, answer, rule}}")
        factors = info.get("factors")
        if factors is not None and (
            type(factors) is not dict or not all(type(v) is str for v in factors.values())
        ):
            raise PromptError(f"{where}.factors is not an object {{factor: level}}")
        source = info.get("response_from")
        if source is not None and (
            type(source) is not str
            or not source
            or components
            or replicates != 1
            or models is not None
        ):
            raise PromptError(
                f"{where}.response_from: {source!r} must name an item field, on an "
                "arm with no components, no models and replicates 1"
            )
        return cls(
            name,
            components,
            None if system is None else _string_list(system, f"{where}.system"),
            fewshot,
            sampling,
            None if models is None else _string_list(models, f"{where}.models"),
            replicates,
            subset_of,
            None if variants is None else _string_list(variants, f"{where}.variants"),
            after,
            factors,
            source,
        )


class LockedStudy:
    """A locked study as §2-§7 render it, from ``protocol.locked`` and the locked files alone.

    ``protocol`` is the ``protocol.locked`` body; ``read(path)`` returns the locked bytes of a
    study-relative path (``None`` when no such file is locked); ``components`` maps each
    ``[components]`` name to its path (the locked spec's table); ``stimuli`` maps each
    stimulus id of an image-folder study to its locked path. Everything is parsed here, so a
    :class:`PromptError` (or an :class:`~verify._items.ItemError`) names the first fault.
    """

    def __init__(
        self,
        protocol: Mapping[str, Any],
        read: Callable[[str], bytes | None],
        components: Mapping[str, str],
        stimuli: Mapping[str, str] | None = None,
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.protocol = protocol
        self.spec = spec
        self._read = read
        self.component_paths = dict(components)
        self.stimulus_paths = dict(stimuli or {})
        arms = protocol.get("arms")
        if type(arms) is not dict or not arms:
            raise PromptError("protocol.locked has no arms object")
        self.arms = {name: Arm.from_locked(name, info) for name, info in arms.items()}
        design = protocol.get("design")
        if type(design) is not dict:
            raise PromptError("protocol.locked has no design object")
        self.seed = _seed(design.get("seed"), "protocol.locked design.seed")
        replicates = design.get("replicates")
        if type(replicates) is not int or replicates < 1:
            raise PromptError(f"protocol.locked design.replicates: {replicates!r} is not >= 1")
        self.replicates: int = replicates
        self.models = self._models()
        self.multi_model = "models" in protocol
        # §1 items, or the image folder's stimuli
        self.items: ItemFile | None = None
        record = protocol.get("items")
        if record is not None:
            if type(record) is not dict or type(record.get("path")) is not str:
                raise PromptError("protocol.locked items is not an object with a path")
            try:  # §1.4: a locked range keeps the file's first N items
                self.items = self._item_file(record["path"], "protocol.locked items").ranged(record)
            except ItemError as exc:
                raise PromptError(str(exc)) from None
            self.item_ids = [item.id for item in self.items.items]
            self._fields: dict[str, Mapping[str, Any]] = {
                item.id: item.data for item in self.items.items
            }
        else:
            stimuli_ids = protocol.get("stimuli")
            if type(stimuli_ids) is not list or any(type(s) is not str for s in stimuli_ids):
                raise PromptError("protocol.locked has neither items nor a stimuli list")
            self.item_ids = list(stimuli_ids)
            self._fields = {s: {"id": s} for s in stimuli_ids}
        # §2 the item template and the options
        prompt = protocol.get("prompt")
        if prompt is not None and type(prompt) is not dict:
            raise PromptError("protocol.locked prompt is not an object")
        prompt = prompt or {}
        self.template: Template | None = None
        if prompt.get("item") is not None:
            self.template = self._template(prompt["item"], "protocol.locked prompt.item")
            _refuse_answer_slots(self.template)
        elif self.items is not None:
            raise PromptError("protocol.locked prompt.item: an item file needs an item template")
        option_format = prompt.get("option_format", DEFAULT_OPTION_FORMAT)
        separator = prompt.get("option_separator", DEFAULT_OPTION_SEPARATOR)
        if type(option_format) is not str or type(separator) is not str:
            raise PromptError("protocol.locked prompt.option_format/option_separator: not text")
        self.option_format = option_format_template(option_format)
        self.option_separator: str = separator
        # §4 the example sets
        self.fewshot: dict[str, FewShot] = {}
        tables = protocol.get("fewshot")
        if tables is not None:
            if type(tables) is not dict:
                raise PromptError("protocol.locked fewshot is not an object")
            for name, table in tables.items():
                self.fewshot[name] = self._fewshot(name, table)
        # docs/variants.md: the per-item variants
        self.variants: Variants | None = None
        if protocol.get("variants") is not None:
            if self.items is None:
                raise PromptError("protocol.locked variants: variants need an item file")
            counts = [len(item.data.get("options") or []) for item in self.items.items]
            try:
                self.variants = Variants(protocol, self._read, counts)
            except VariantError as exc:
                raise PromptError(str(exc)) from None
        self._varied: dict[tuple[str, str], dict[str, Any]] = {}
        # study-spec.md "Factors": each cell's item edits and template
        self.factors: Factors | None = None
        if protocol.get("factorial") is not None:
            try:
                self.factors = Factors(protocol)
            except FactorialError as exc:
                raise PromptError(str(exc)) from None
        self._level_templates: dict[str, Template] = {}
        self._edited: dict[tuple[str, str, str | None], Mapping[str, Any]] = {}
        for arm in self.arms.values():
            self._check_arm(arm)
        self._draws: dict[tuple[str, str], list[Item]] = {}
        self.draw_hashes = self._draw_hashes()
        # §8: the {steps.*} values of each item, from the recorded step decisions
        self.step_values: dict[str, dict[str, str]] = {}
        self.has_steps = protocol.get("steps") is not None
        self._lock_fill = False
        # §9: the {prior.*} values of each answer-dependent trial, from its first stage
        self.prior_values: dict[str, dict[str, str]] = {}

    def _draw_hashes(self) -> int:
        """How many order hashes every draw of the study needs (``fixed`` sets need none)."""
        total = 0
        for fs in self.fewshot.values():
            if fs.rule == "fixed":
                continue
            items: set[str] = set()
            for arm in self.arms.values():
                if arm.fewshot == fs.name:
                    items.update(self.arm_items(arm.name))
            total += len(fs.examples.items) * len(items)
        return total

    def _check_draw_work(self) -> None:
        if self.draw_hashes > MAX_DRAW_HASHES:
            raise PromptError(
                f"the few-shot draws need {self.draw_hashes} order hashes (examples x test "
                f"items), more than the {MAX_DRAW_HASHES} the verifier computes"
            )

    # -------------------------------------------------------------------------- reading

    def _bytes(self, path: str, what: str) -> bytes:
        data = self._read(path)
        if data is None:
            raise PromptError(f"{what}: {path} is not a locked file with readable bytes")
        return data

    def _item_file(self, path: str, what: str) -> ItemFile:
        try:
            item_format(path)
            return read_items(self._bytes(path, what), path)
        except ItemError as exc:
            raise PromptError(f"{what}: {exc}") from None

    def _template(self, path: Any, what: str) -> Template:
        if type(path) is not str:
            raise PromptError(f"{what}: {path!r} is not a path")
        return read_template(self._bytes(path, what), path)

    def _models(self) -> dict[str | None, Mapping[str, Any]]:
        models = self.protocol.get("models")
        if models is not None:
            if type(models) is not dict or not models:
                raise PromptError("protocol.locked models is not an object of model tables")
            for name, table in models.items():
                if type(table) is not dict:
                    raise PromptError(f"protocol.locked models.{name} is not an object")
            order = self.protocol.get("model_order", sorted(models))
            if type(order) is not list or sorted(order) != sorted(models):
                raise PromptError(
                    f"protocol.locked model_order {order!r} is not the names of models"
                )
            return {name: models[name] for name in order}
        model = self.protocol.get("model")
        if type(model) is not dict:
            raise PromptError("protocol.locked has neither model nor models")
        return {None: model}

    def _fewshot(self, name: str, table: Any) -> FewShot:
        where = f"protocol.locked fewshot.{name}"
        if type(table) is not dict:
            raise PromptError(f"{where} is not an object")
        record = table.get("examples")
        if type(record) is not dict or type(record.get("path")) is not str:
            raise PromptError(f"{where}.examples is not an object with a path")
        examples = self._item_file(record["path"], f"{where}.examples")
        rule = table.get("rule")
        if rule not in RULES:
            raise PromptError(f"{where}.rule: {rule!r} is not one of {', '.join(RULES)}")
        ids: tuple[str, ...] = ()
        count = table.get("count")
        if rule == "fixed":
            ids = _string_list(table.get("ids"), f"{where}.ids")
            known = {e.id for e in examples.items}
            for i in ids:
                if i not in known:
                    raise PromptError(f"{where}.ids: {i!r} is not an example of {examples.path}")
            if count is None:
                count = len(ids)
            elif count != len(ids):
                raise PromptError(f"{where}.count: {count!r} is not the number of ids")
        if type(count) is not int or count < 1:
            raise PromptError(f"{where}.count: {count!r} is not an integer >= 1")
        seed = None
        if rule != "fixed":
            seed = _seed(table.get("seed"), f"{where}.seed")
        field_name = table.get("field")
        if rule in ("same-metadata", "distinct-metadata") and type(field_name) is not str:
            raise PromptError(f"{where}.field: {field_name!r} is not a metadata field name")
        order = table.get("order", "drawn")
        if order not in ORDERS:
            raise PromptError(f"{where}.order: {order!r} is not one of {', '.join(ORDERS)}")
        style = table.get("style", "turns")
        if style not in STYLES:
            raise PromptError(f"{where}.style: {style!r} is not one of {', '.join(STYLES)}")
        answer = table.get("answer")
        template = (
            parse_template(DEFAULT_ANSWER_TEMPLATE, "the default answer template")
            if answer is None
            else self._template(answer, f"{where}.answer")
        )
        if self.template is None:
            raise PromptError(f"{where}: examples are rendered with [prompt] item, which is absent")
        return FewShot(
            name,
            examples,
            str(rule),
            count,
            ids,
            seed,
            field_name if type(field_name) is str else None,
            str(order),
            str(style),
            template,
        )

    def _check_arm(self, arm: Arm) -> None:
        where = f"protocol.locked arms.{arm.name}"
        names = [n for n in arm.components if self.reserved(n)]
        if "item" in names and self.template is None:
            raise PromptError(f"{where}.components: 'item' without [prompt] item")
        fs = self.fewshot.get(arm.fewshot) if arm.fewshot is not None else None
        if arm.fewshot is not None and fs is None:
            raise PromptError(f"{where}.fewshot: {arm.fewshot!r} is not a [fewshot] set")
        if "examples" in names and (fs is None or fs.style != "inline"):
            raise PromptError(f"{where}.components: 'examples' without inline few-shot examples")
        if arm.models is not None:
            if not self.multi_model:
                raise PromptError(f"{where}.models: the study has one [model], not [models]")
            for name in arm.models:
                if name not in self.models:
                    raise PromptError(f"{where}.models: {name!r} is not a [models] table")
        sampling_parameters({}, arm.sampling)

    # -------------------------------------------------------------------------- §3 texts

    def component(self, name: str) -> str:
        """A component's text, trailing ``\\n`` removed."""
        path = self.component_paths.get(name)
        if path is None:
            raise PromptError(f"component {name!r} is not in the locked spec's [components]")
        data = self._bytes(path, f"component {name!r}")
        try:
            return data.decode("utf-8").rstrip("\n")
        except UnicodeDecodeError:
            raise PromptError(f"component {name!r}: {path} is not UTF-8") from None

    def fields(self, item_id: str) -> Mapping[str, Any]:
        """The canonical-form object of item ``item_id`` (``{"id"}`` for a stimulus)."""
        fields = self._fields.get(item_id)
        if fields is None:
            raise PromptError(f"{item_id!r} is not a locked item or stimulus")
        return fields

    def _render(self, template: Template, fields: Mapping[str, Any], answer: bool) -> str:
        values = item_values(fields, self.option_format, self.option_separator, answer=answer)
        return template.render(values, f"item {fields.get('id')!r}").rstrip("\n")

    def varied(self, item_id: str, variant: str | None) -> Mapping[str, Any]:
        """The item as its variant makes it (``docs/variants.md``), or as written."""
        if variant is None:
            return self.fields(item_id)
        if self.variants is None:
            raise PromptError(f"variant {variant!r}: the study declares no variants")
        key = (item_id, variant)
        if key not in self._varied:
            try:
                self._varied[key] = self.variants.apply(variant, self.fields(item_id))
            except VariantError as exc:
                raise PromptError(str(exc)) from None
        return self._varied[key]

    def template_of(self, arm: str | None) -> Template | None:
        """The item template of an arm: its cell's level template, else ``[prompt] item``."""
        info = self.arms.get(arm) if arm is not None else None
        if info is None or info.factors is None or self.factors is None:
            return self.template
        try:
            path = self.factors.template(info.factors)
        except FactorialError as exc:
            raise PromptError(f"arm {arm}: {exc}") from None
        if path is None:
            return self.template
        if path not in self._level_templates:
            template = self._template(path, f"protocol.locked factors (arm {arm}) template")
            _refuse_answer_slots(template)
            self._level_templates[path] = template
        return self._level_templates[path]

    def item_templates(self) -> list[Template]:
        """``[prompt] item`` and every factor level's template (their step slots are read)."""
        out = [self.template] if self.template is not None else []
        if self.factors is not None:
            for f, levels in self.factors.levels.items():
                for lv, record in levels.items():
                    path = record.get("template")
                    if type(path) is not str:
                        continue
                    if path not in self._level_templates:
                        template = self._template(path, f"protocol.locked factors.{f} level {lv}")
                        _refuse_answer_slots(template)
                        self._level_templates[path] = template
                    out.append(self._level_templates[path])
        return out

    def _lock_values(self, template: Template, fields: Mapping[str, Any]) -> str:
        """``template`` rendered for ``fields``, each ``{steps.*}`` slot filled with ``""``."""
        values = item_values(fields, self.option_format, self.option_separator)
        values.update({s.name: "" for s in template.slots if s.name.startswith("steps.")})
        return template.render(values, f"item {fields.get('id')!r}")

    def edited(self, item_id: str, variant: str | None, arm: str | None) -> Mapping[str, Any]:
        """The item of a trial: varied, then its cell's factor edits (study-spec.md)."""
        fields = self.varied(item_id, variant)
        info = self.arms.get(arm) if arm is not None else None
        if info is None or info.factors is None or self.factors is None:
            return fields
        assert arm is not None
        key = (arm, item_id, variant)
        if key not in self._edited:
            try:
                self._edited[key] = self.factors.apply(fields, info.factors)
            except FactorialError as exc:
                raise PromptError(f"arm {arm}: {exc}") from None
        return self._edited[key]

    def item_block(self, item_id: str, variant: str | None = None, arm: str | None = None) -> str:
        """§3.1: the item template rendered for the item, trailing ``\\n`` removed.

        ``arm``: a factorial cell's template and item edits apply.
        """
        template = self.template_of(arm)
        if template is None:
            raise PromptError("the study has no item template ([prompt] item)")
        fields = self.edited(item_id, variant, arm)
        if not self.has_steps:
            return self._render(template, fields, False)
        values = item_values(fields, self.option_format, self.option_separator)
        if self._lock_fill:  # at lock, the step slots are checked apart (verify._steps)
            values.update({s.name: "" for s in template.slots if s.name.startswith("steps.")})
        else:
            values.update(self.step_values.get(item_id, {}))
        return template.render(values, f"item {fields.get('id')!r}").rstrip("\n")

    def own_text(self, arm: str) -> str:
        """§3.2: the arm's own text (``arms.X.sha256`` hashes it); empty without components.

        Its components other than ``item`` and ``examples``, each with trailing ``\\n``
        removed, joined by a blank line, followed by one ``\\n``; ``""`` when there are none.
        """
        parts = [self.component(n) for n in self.arms[arm].components if not self.reserved(n)]
        return "\n\n".join(parts) + "\n" if parts else ""

    def fewshot_of(self, arm: str) -> FewShot | None:
        """The example set arm ``arm`` uses, or ``None``."""
        name = self.arms[arm].fewshot
        return None if name is None else self.fewshot[name]

    def examples(self, arm: str, item_id: str) -> list[tuple[str, str]]:
        """§4: ``(user text, answer text)`` of each example arm ``arm`` shows for the item."""
        fs = self.fewshot_of(arm)
        template = self.template_of(arm)
        if fs is None or template is None:
            return []
        key = (fs.name, item_id)
        if key not in self._draws:
            self._check_draw_work()
            self._draws[key] = draw(fs, item_id, self.fields(item_id).get("metadata") or {})
        return [
            (self._render(template, e.data, False), self._render(fs.answer, e.data, True))
            for e in self._draws[key]
        ]

    def _arm_parts(self, arm: str) -> list[tuple[str, str]]:
        """§3.2: (kind, component name) of each part of an arm's text, in order.

        The kind is "item", "examples" or "component"; the item block is appended when the
        study has an item template and the arm does not place it, the inline examples put
        before the item block when the arm does not place them.
        """
        fs = self.fewshot_of(arm)
        inline = fs is not None and fs.style == "inline"
        parts = [(n if self.reserved(n) else "component", n) for n in self.arms[arm].components]
        kinds = [kind for kind, _ in parts]
        if self.template is not None and "item" not in kinds:
            parts.append(("item", ""))
            kinds.append("item")
        if inline and "examples" not in kinds:
            at = kinds.index("item") if "item" in kinds else len(parts)
            parts.insert(at, ("examples", ""))
        return parts

    def _prior_component(self, name: str, trial: str | None) -> str:
        """§9: an answer-dependent arm's component, filled with its trial's ``{prior.*}``."""
        path = self.component_paths.get(name, name)
        raw = self._bytes(path, f"component {name!r}").decode("utf-8")
        return (
            parse_template(raw, path)
            .render(self.prior_values.get(trial or "", {}), f"trial {trial}")
            .rstrip("\n")
        )

    def arm_text(
        self, arm: str, item_id: str, variant: str | None = None, trial: str | None = None
    ) -> str | None:
        """§3.2: the text block of the trial's user message, or ``None`` when it has none.

        An answer-dependent arm's components are templates filled with the ``{prior.*}``
        values of ``trial`` (§9).
        """
        info = self.arms[arm]
        texts: list[str] = []
        for kind, name in self._arm_parts(arm):
            if kind == "item":
                texts.append(self.item_block(item_id, variant, arm))
            elif kind == "examples":
                texts.append(
                    "\n\n".join(f"{u}\n{a}" for u, a in self.examples(arm, item_id)).rstrip("\n")
                )
            elif info.after is not None:
                texts.append(self._prior_component(name, trial))
            else:
                texts.append(self.component(name))
        joined = "\n\n".join(texts)
        return joined + "\n" if joined else None

    def system(self, arm: str) -> str | None:
        """§3.3: the system prompt, or ``None`` when the arm sets none."""
        names = self.arms[arm].system
        return None if names is None else "\n\n".join(self.component(n) for n in names)

    def _image(self, path: str) -> dict[str, Any]:
        return image_block(self._bytes(path, "image"), path)

    def reserved(self, name: str) -> bool:
        """Whether component name ``name`` stands for the item or examples block (§3).

        A name the locked spec's ``[components]`` defines is a component (a study locked
        before the names were reserved).
        """
        return name in RESERVED_COMPONENTS and name not in self.component_paths

    def image_paths(self, item_id: str) -> list[str]:
        """§3.4: the study-relative paths of the images of the trial's user content."""
        if self.items is None:
            path = self.stimulus_paths.get(item_id)
            if path is None:
                raise PromptError(f"stimulus {item_id!r} is not a locked stimulus file")
            return [path]
        images = self.fields(item_id).get("images") or []
        return [resolve_image(self.items.path, str(i)) for i in images]

    def user_content(
        self, arm: str, item_id: str, variant: str | None = None, trial: str | None = None
    ) -> list[dict[str, Any]]:
        """§3.4: an image block per image, then the arm text's block if any."""
        content = [self._image(p) for p in self.image_paths(item_id)]
        text = self.arm_text(arm, item_id, variant, trial)
        if text is not None:
            content.append(_text_block(text))
        if not content:
            raise PromptError(f"arm {arm}, item {item_id!r}: the user message would be empty")
        return content

    # -------------------------------------------------------------------------- §5, §6

    def parameters(self, arm: str, model: str | None) -> dict[str, Any]:
        """§5: the effective parameters of ``model`` (``None``: the one ``[model]``) for ``arm``."""
        if model not in self.models:
            raise PromptError(f"model {model!r} is not a locked model")
        return sampling_parameters(self.models[model], self.arms[arm].sampling)

    def request(
        self,
        arm: str,
        model: str | None,
        item_id: str,
        wire: str = "messages",
        variant: str | None = None,
        trial: str | None = None,
    ) -> dict[str, Any]:
        """§6: the request of a trial; ``wire = "openai-compatible"`` for that backend's form.

        ``variant``: the trial's variant, applied to the item first (``docs/variants.md`` §4).
        """
        messages: list[dict[str, Any]] = []
        for user, answer in self.examples(arm, item_id) if self._turns(arm) else []:
            messages.append({"role": "user", "content": [_text_block(user)]})
            messages.append({"role": "assistant", "content": [_text_block(answer)]})
        messages.append(
            {"role": "user", "content": self.user_content(arm, item_id, variant, trial)}
        )
        request = messages_request(self.parameters(arm, model), messages, self.system(arm))
        return wire_request(request, wire)

    def request_bytes(
        self,
        arm: str,
        model: str | None,
        item_id: str,
        wire: str = "messages",
        variant: str | None = None,
        trial: str | None = None,
    ) -> bytes:
        """The canonical JSON of :meth:`request` (what the request blob must be, byte for byte)."""
        try:
            return canonical_json(self.request(arm, model, item_id, wire, variant, trial))
        except CanonicalError as exc:
            raise PromptError(f"arm {arm}, item {item_id!r}: {exc}") from None

    def _turns(self, arm: str) -> bool:
        fs = self.fewshot_of(arm)
        return fs is not None and fs.style == "turns"

    # -------------------------------------------------------------------------- §7 schedule

    def arm_models(self, arm: str) -> list[str | None]:
        """The arm's models in model order (``[None]`` for a study with one ``[model]``)."""
        if not self.multi_model:
            return [None]
        if self.arms[arm].response_from is not None:  # trials.md §6: a data arm runs once
            return [""]
        names = self.arms[arm].models
        return [m for m in self.models if names is None or m in names]

    def arm_items(self, arm: str) -> list[str]:
        """The arm's items: all, or the seeded subset of ``[arms.X] items``, in item order."""
        chosen = self.arms[arm].items
        if chosen is None:
            return list(self.item_ids)
        return subset(self.item_ids, chosen[0], chosen[1])

    def arm_replicates(self, arm: str) -> int:
        """The arm's replicates (``[design] replicates`` unless the arm sets its own)."""
        reps = self.arms[arm].replicates
        return self.replicates if reps is None else reps

    def arm_variants(self, arm: str) -> list[str | None]:
        """The arm's variants in variant order (``[None]`` for a study without variants)."""
        if self.variants is None:
            return [None]
        return list(self.variants.of_arm(self.arms[arm].variants))

    def trial_count(self) -> int:
        """The number of trials (computed without listing them)."""
        return sum(
            len(self.arm_models(a))
            * len(self.arm_items(a))
            * self.arm_replicates(a)
            * len(self.arm_variants(a))
            for a in self.arms
        )

    def trials(self) -> list[tuple[str, str | None, str, int, str | None]]:
        """``(arm, model, item, rep, variant)`` of every trial, in the crossing order of §7.

        With variants (``docs/variants.md`` §4) the variant loop runs inside the item loop.
        """
        return [
            (arm, model, item, rep, variant)
            for arm in self.arms
            for model in self.arm_models(arm)
            for item in self.arm_items(arm)
            for variant in self.arm_variants(arm)
            for rep in range(1, self.arm_replicates(arm) + 1)
        ]

    def trial_ids(self) -> list[str]:
        """The trial ids in execution order (ascending ``SHA-256("{seed}|{trial id}")``)."""
        return execution_order((trial_id(*t) for t in self.trials()), self.seed)

    def variant_truth(self, item_id: str, variant: str) -> tuple[str, str | None]:
        """(answer, order) of a variant trial: the varied key and the permutation's order."""
        varied = self.varied(item_id, variant)
        assert self.variants is not None
        try:
            order = self.variants.order_for(variant, self.fields(item_id))
        except VariantError as exc:
            raise PromptError(str(exc)) from None
        return str(varied.get("answer")), order

    # -------------------------------------------------------------------------- checks

    def record_problems(self) -> list[str]:
        """Locked records that differ from the locked files: ``items`` and each example set."""
        problems: list[str] = []
        pairs: list[tuple[str, Any, ItemFile]] = []
        if self.items is not None:
            pairs.append(("protocol.locked items", self.protocol.get("items"), self.items))
        tables = self.protocol.get("fewshot") or {}
        for name, fs in self.fewshot.items():
            pairs.append(
                (
                    f"protocol.locked fewshot.{name}.examples",
                    tables[name].get("examples"),
                    fs.examples,
                )
            )
        for where, record, parsed in pairs:
            want = parsed.record()
            if record != want:
                diffs = [
                    f"{k} {record.get(k)!r} (the file gives {want[k]!r})"
                    for k in want
                    if record.get(k) != want[k]
                ]
                extra = sorted(set(record) - set(want))
                problems.append(
                    f"{where} ({parsed.path}): "
                    + "; ".join(diffs + [f"unexpected member {k!r}" for k in extra])
                )
        return problems

    def lock_problems(self) -> list[str]:
        """What ``ledger lock`` refuses and the locked study still shows (first of each kind).

        Every item's template fills (naming the first item that lacks a slot), every example
        renders, every draw finds enough examples, no example leaks a test item, every
        effective model parameter is in its backend's range.
        """
        problems: list[str] = []

        def first(check: Callable[[], None]) -> None:
            try:
                check()
            except PromptError as exc:
                problems.append(str(exc))

        def items() -> None:
            for item_id in self.item_ids if self.template is not None else ():
                self.item_block(item_id)

        def examples(fs: FewShot) -> Callable[[], None]:
            def run() -> None:
                for e in fs.examples.items:
                    if self.template is not None:
                        self._render(self.template, e.data, False)
                    self._render(fs.answer, e.data, True)

            return run

        def draws(arm: str) -> Callable[[], None]:
            def run() -> None:
                fs = self.fewshot_of(arm)
                if fs is None or self.draw_hashes > MAX_DRAW_HASHES:
                    return
                for item_id in self.arm_items(arm):
                    self._draws.setdefault(
                        (fs.name, item_id),
                        draw(fs, item_id, self.fields(item_id).get("metadata") or {}),
                    )

            return run

        def texts(arm: str) -> Callable[[], None]:
            def run() -> None:
                self.own_text(arm)
                self.system(arm)

            return run

        def variants() -> None:
            for arm in self.arms:
                for item_id in self.arm_items(arm) if self.template is not None else ():
                    for variant in self.arm_variants(arm):
                        if variant is not None:
                            self.item_block(item_id, variant)

        def cells() -> None:  # study-spec.md "Factors": every cell's edits and template fill
            for arm, info in self.arms.items():
                if info.factors is None:
                    continue
                for item_id in self.arm_items(arm) if self.template is not None else ():
                    self.item_block(item_id, None, arm)

        def nulls() -> None:  # study-spec.md "Factors": no level leaves an item unchanged
            fx = self.factors
            if fx is None or self.template is None:
                return
            reference = {f: fx.order[f][0] for f in fx.crossed}
            for f in fx.crossed:
                for lv in fx.order[f][1:] if fx.scope[f] == "item" else ():
                    cell = {**reference, f: lv}
                    path = fx.template(cell)
                    tpl = self.template if path is None else self._template(path, path)
                    for item_id in self.item_ids:
                        fields = self.fields(item_id)
                        try:
                            edited = fx.apply(fields, cell)
                        except FactorialError as exc:
                            raise PromptError(str(exc)) from None
                        if self._lock_values(tpl, edited) == self._lock_values(
                            self.template, fields
                        ):
                            raise PromptError(
                                f"item {item_id!r}: factor {f!r} level {lv!r} "
                                "leaves the item's request unchanged (a silent "
                                "null arm)"
                            )

        self._lock_fill = True
        try:
            first(items)
            first(variants)
            first(cells)
            first(nulls)
        finally:
            self._lock_fill = False
        for arm in self.arms:
            first(texts(arm))
        first(self._check_draw_work)
        for fs in self.fewshot.values():
            first(examples(fs))
        for arm in self.arms:
            first(draws(arm))
        tests = [self.fields(i) for i in self.item_ids]
        for fs in self.fewshot.values():
            problems.extend(leak_problems(fs, tests)[:1])
        for name, table in self.models.items():
            where = "[model]" if name is None else f"[models.{name}]"
            problems.extend(parameter_problems(where, table))
        for arm in self.arms:
            if not self.arms[arm].sampling:
                continue
            for model in self.arm_models(arm):
                where = "[model]" if model is None else f"[models.{model}]"
                where += f" with [arms.{arm}] sampling"
                problems.extend(parameter_problems(where, self.parameters(arm, model)))
        if self.factors is not None:
            problems += expansion_problems(self.protocol, self.spec, self._read)
        return list(dict.fromkeys(problems))
