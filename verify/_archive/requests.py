"""The ``requests`` check: every request is the one re-rendered from the locked files.

``docs/prompts.md`` (and, for a study without items, ``docs/trials.md`` §1): each recorded
request blob must be byte for byte the canonical JSON of the request that
:class:`verify._prompts.LockedStudy` renders for its trial from ``protocol.locked`` and the
locked files alone; a difference is named by trial, seq and the first member that differs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from verify._archive.steps import attach_steps, staged
from verify._archive.view import Archive
from verify._canonical import canonical_json
from verify._items import ItemError
from verify._ledgerfile import _State
from verify._prompts import (
    LockedStudy,
    PromptError,
    parse_trial_id,
    trial_variant,
    wire_form,
)
from verify._prompts import media_type as _media_type
from verify._reader.files import MAX_PARSED_BYTES
from verify._report import Check
from verify._safeio import human_bytes

__all__ = ["check_requests", "first_difference", "is_legacy"]


def _b64(text: object) -> bytes | None:
    if type(text) is not str:
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _request_problem(req: Any, arm_text: str, stimulus: bytes, model: dict[str, Any]) -> str | None:
    """How a decoded request differs from the locked one (docs/trials.md §1), or ``None``."""
    content = _content_of(req)
    if isinstance(content, str):
        return content
    image, text = content
    openai = type(image) is dict and image.get("type") == "image_url"
    problem = _parameters_problem(req, model, openai)
    if problem is not None:
        return problem
    found = _openai_image(image) if openai else _messages_image(image)
    if isinstance(found, str):
        return found
    media, data = found
    if data is None:
        return "the image data is not standard padded base64"
    if data != stimulus:
        return "the image bytes are not the locked stimulus file"
    if media != _media_type(stimulus):
        return f"media_type {media!r} does not follow the stimulus's magic bytes"
    if type(text) is not dict or text.get("type") != "text" or set(text) != {"type", "text"}:
        return "the second block is not a text block"
    if text.get("text") != arm_text:
        return "the text is not the locked arm text"
    return None


def _content_of(req: Any) -> list[Any] | str:
    """The two content blocks of the request's single user message, or what is wrong."""
    if type(req) is not dict:
        return "the request is not a JSON object"
    messages = req.get("messages")
    if type(messages) is not list or len(messages) != 1 or type(messages[0]) is not dict:
        return "the request does not hold exactly one message"
    message = messages[0]
    if message.get("role") != "user" or set(message) != {"role", "content"}:
        return "the message is not a single user message"
    content = message.get("content")
    if type(content) is not list or len(content) != 2:
        return "the message does not hold exactly an image block and a text block"
    return content


def _parameters_problem(req: dict[str, Any], model: dict[str, Any], openai: bool) -> str | None:
    """The request's members beside ``messages`` are the locked model's id and sampling."""
    allowed = {"model", "messages", "max_tokens", "temperature", "top_p"}
    if not openai:
        allowed.add("top_k")
    extra = sorted(set(req) - allowed)
    if extra:
        return f"the request has member(s) {', '.join(extra)} (a system prompt or an addition)"
    want = {
        "model": model.get("id"),
        "max_tokens": model.get("max_tokens"),
        "temperature": model.get("temperature"),
        "top_p": model.get("top_p"),
        "top_k": None if openai else model.get("top_k"),
    }
    for name, value in want.items():
        got = req.get(name)
        if (got is None) != (value is None) or (
            got is not None
            and (type(got) is bool or got != value or (name in ("model",) and type(got) is not str))
        ):
            return f"{name} is {got!r}, the locked model says {value!r}"
    return None


def _openai_image(image: Any) -> tuple[Any, bytes | None] | str:
    """(media type, bytes) of a chat-completions ``image_url`` data URL block, or the problem."""
    url = image.get("image_url", {}).get("url") if type(image) is dict else None
    match = re.fullmatch(r"data:([a-z/]+);base64,(.*)", url or "", re.S)
    if set(image) != {"type", "image_url"}:
        return "the image block has unexpected members"
    return (match.group(1), _b64(match.group(2))) if match else (None, None)


def _messages_image(image: Any) -> tuple[Any, bytes | None] | str:
    """(media type, bytes) of a Messages base64 ``image`` block, or the problem."""
    source = image.get("source") if type(image) is dict else None
    if type(image) is not dict or image.get("type") != "image" or type(source) is not dict:
        return "the first block is not an image block"
    if set(image) != {"type", "source"} or set(source) != {"type", "media_type", "data"}:
        return "the image block has unexpected members"
    if source.get("type") != "base64":
        return "the image source is not base64"
    return source.get("media_type"), _b64(source.get("data"))


_NEW_MEMBERS = ("items", "prompt", "fewshot", "models")
_NEW_ARM_MEMBERS = ("system", "fewshot", "sampling", "models", "replicates", "items")


def is_legacy(protocol: dict[str, Any]) -> bool:
    """Whether a study is an image study as before items (``docs/prompts.md``, first lines)."""
    if any(name in protocol for name in _NEW_MEMBERS):
        return False
    arms = protocol.get("arms")
    return not any(
        type(info) is dict and any(name in info for name in _NEW_ARM_MEMBERS)
        for info in (arms.values() if type(arms) is dict else ())
    )


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, _Missing) else "absent"
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


class _Missing:
    pass


_ABSENT = _Missing()


def first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two JSON values first differ (``messages[0].content[1].text: ...``), or ``None``."""
    here = path or "the request"
    if type(got) is dict and type(want) is dict:
        return _dict_difference(got, want, path)
    if type(got) is list and type(want) is list:
        return _list_difference(got, want, path)
    if type(got) is str and type(want) is str and got != want:
        return _text_difference(got, want, here)
    same_number = (
        type(got) in (int, float) and type(want) in (int, float) and got == want
    )  # canonical JSON writes 1.0 as 1
    if same_number or (type(got) is type(want) and got == want):
        return None
    return f"{here}: recorded {_short(got)}, re-rendered {_short(want)}"


def _dict_difference(got: dict[str, Any], want: dict[str, Any], path: str) -> str | None:
    """The first member, in key order, where two objects differ."""
    for key in sorted(set(got) | set(want)):
        found = first_difference(
            got.get(key, _ABSENT), want.get(key, _ABSENT), f"{path}.{key}" if path else key
        )
        if found is not None:
            return found
    return None


def _list_difference(got: list[Any], want: list[Any], path: str) -> str | None:
    """The first element where two arrays differ, or their lengths."""
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        found = first_difference(g, w, f"{path}[{i}]")
        if found is not None:
            return found
    if len(got) != len(want):
        return f"{path or 'the request'}: {len(got)} elements recorded, {len(want)} re-rendered"
    return None


def _text_difference(got: str, want: str, here: str) -> str:
    """The first character where two different strings differ, shown in context."""
    at = next(
        (i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
        min(len(got), len(want)),
    )
    start = max(0, at - 30)
    return (
        f"{here}: differs at character {at + 1}: recorded "
        f"{_short(got[start : at + 50])}, re-rendered {_short(want[start : at + 50])}"
    )


def _verdict(
    a: Archive,
    study: LockedStudy,
    ref: str,
    trial: tuple[str, str | None, str, str | None],
    wire: str,
    legacy: tuple[dict[str, str], dict[str, bytes | None], dict[str, Any]] | None,
    tid: str | None = None,
) -> str | None:
    """Why the request blob ``ref`` is not the re-rendered request of ``trial``, or ``None``."""
    arm, model, item, variant = trial
    data = a.blob(ref, MAX_PARSED_BYTES)
    if data is None:
        return (
            f"request blob {ref} is missing, larger than {human_bytes(MAX_PARSED_BYTES)} or does "
            "not hash to its name"
        )
    if arm not in study.arms:
        return f"arm {arm!r} is not a locked arm"
    try:
        want = study.request_bytes(arm, model, item, wire, variant, tid)
    except (PromptError, ItemError) as exc:
        return f"the request cannot be re-rendered from the locked files: {exc}"
    if data == want:
        return None
    try:
        got = json.loads(data)
    except (ValueError, RecursionError):
        return f"request blob {ref} is not JSON"
    if legacy is not None:
        texts, stimuli, locked_model = legacy
        if arm in texts and stimuli.get(item) is not None:
            found = _request_problem(got, texts[arm], stimuli[item] or b"", locked_model)
            if found is not None:
                return f"request blob {ref}: {found}"
    try:
        where = first_difference(got, json.loads(want))
    except RecursionError:
        where = "the recorded request is nested too deeply to compare"
    if where is None:
        return (
            f"request blob {ref} holds the re-rendered request but not as its canonical JSON bytes"
        )
    return f"request blob {ref} is not the request re-rendered from the locked files: {where}"


def _request_ref(a: Archive, st: _State, seq: int, body: dict[str, Any]) -> str | None:
    """The request blob a trial.requested names, if it is its ``request_sha256``."""
    ref = a.blob_ref(seq, "request")
    if ref is None or body.get("request_sha256") != ref:
        st.fail(
            f"seq {seq}: request_sha256 {body.get('request_sha256')!r} is not the "
            f"request blob's hash {ref!r}",
            seq,
        )
        return None
    return ref


def _legacy(a: Archive) -> _Legacy:
    """An image study's arm texts, stimulus bytes by name and ``model`` table."""
    texts, _ = a.arm_texts()
    model = a.protocol.get("model")
    stimuli: dict[str, bytes | None] = {}
    for path, (role, _, _) in a.locked_files.items():
        if role == "stimulus":
            stimuli[path.rsplit("/", 1)[-1].rsplit(".", 1)[0]] = a.locked_blob(path)
    return texts, stimuli, model if type(model) is dict else {}


def _trial_of(
    st: _State, study: LockedStudy, seq: int, body: dict[str, Any]
) -> tuple[str, str | None, str, str | None] | None:
    """(arm, model, item, variant) of a request's trial id, or None if it cannot be read.

    The event's variant, arm and stimulus are checked against them.
    """
    trial = body.get("trial")
    try:
        arm, model_name, item, _ = parse_trial_id(
            str(trial), study.multi_model, study.variants is not None
        )
    except PromptError as exc:
        st.fail(f"seq {seq}: {exc}", seq)
        return None
    variant = trial_variant(str(trial))
    if body.get("variant") != variant:
        st.fail(
            f"seq {seq}: trial {trial}: the event names variant "
            f"{body.get('variant')!r}, its trial id {variant!r}",
            seq,
        )
    if (body.get("arm"), body.get("stimulus")) != (arm, item):
        st.fail(
            f"seq {seq}: trial {trial}: the event names arm {body.get('arm')!r} and "
            f"stimulus {body.get('stimulus')!r}, its trial id arm {arm!r} and item "
            f"{item!r} (the request is checked against the trial id's)",
            seq,
        )
    return arm, model_name, item, variant


_VerdictKey = tuple[str, str, str | None, str, str, str | None, str | None]
_Legacy = tuple[dict[str, str], dict[str, bytes | None], dict[str, Any]]


def _cached_verdict(
    a: Archive,
    study: LockedStudy,
    ref: str,
    body: dict[str, Any],
    parsed: tuple[str, str | None, str, str | None],
    legacy: _Legacy | None,
    verdicts: dict[_VerdictKey, str | None],
) -> str | None:
    """The :func:`_verdict` on a sent request, once per distinct request body.

    A second stage's request (prompts.md §9) reads its own first stage: one per trial.
    """
    arm, model_name, item, variant = parsed
    trial = str(body.get("trial"))
    wire = wire_form(body.get("backend"))
    second = arm in study.arms and study.arms[arm].after is not None
    key = (ref, arm, model_name, item, wire, variant, trial if second else None)
    if key not in verdicts:
        verdicts[key] = _verdict(a, study, ref, parsed, wire, legacy, trial)
    return verdicts[key]


def check_requests(a: Archive) -> Check:
    """Every request is byte for byte the one re-rendered from the locked files.

    ``docs/prompts.md``: the items, templates, few-shot draws, system prompt, model and
    sampling parameters of its trial; the Messages object, or the chat-completions object for
    the ``openai-compatible`` backend. A study without items (``docs/trials.md`` §1) is also
    checked member by member, to say what differs.
    """
    st = _State("requests")
    study, problem = a.study()
    if study is None:
        st.fail(f"the locked study cannot be re-rendered: {problem}", a.protocol_seq)
    elif staged(a.protocol):  # docs/prompts.md §8-9: requests that read steps or a first stage
        attach_steps(a, study)
    legacy = _legacy(a) if is_legacy(a.protocol) else None
    verdicts: dict[_VerdictKey, str | None] = {}
    count = 0
    answered = {a.body(s).get("request_seq"): s for s in a.of_kind("trial.responded")}
    supplied = 0
    for seq in a.of_kind("trial.requested"):
        count += 1
        body = a.body(seq)
        ref = _request_ref(a, st, seq, body)
        if ref is None or study is None:
            continue
        trial = body.get("trial")
        parsed = _trial_of(st, study, seq, body)
        if parsed is None:
            continue
        arm, _, item, _ = parsed
        data_arm = arm in study.arms and study.arms[arm].response_from is not None
        if data_arm or body.get("backend") == "data":  # docs/trials.md §6: no request sent
            supplied += 1
            for at, why in _data_trial(a, study, seq, body, arm, item, answered.get(seq)):
                st.fail(f"seq {at}: trial {trial}: {why}", at)
            continue
        verdict = _cached_verdict(a, study, ref, body, parsed, legacy, verdicts)
        if verdict is not None:
            st.fail(f"seq {seq}: trial {trial}: {verdict}", seq)
    return st.check(
        f"{count} requests are byte for byte the requests re-rendered from the locked files "
        f"(items, templates, few-shot examples, arm texts, images, model and sampling "
        f"parameters; {len(verdicts)} distinct request bodies)"
        + (
            f"; {supplied} data trials took their responses byte for byte from the locked item "
            "field"
            if supplied
            else ""
        )
    )


def _data_trial(
    a: Archive,
    study: LockedStudy,
    seq: int,
    body: dict[str, Any],
    arm: str,
    item: str,
    response_seq: int | None,
) -> list[tuple[int, str]]:
    """docs/trials.md §6: a data trial's source record and its response, re-derived.

    Its arm takes its responses from an item field (``response_from``), its events name the
    backend ``data``, its ``request`` blob is the canonical JSON of ``{"item",
    "response_from", "source": "data"}``, and its response, of format ``text``, is the
    field's text as written in the locked item file, byte for byte.
    """
    spec = study.arms.get(arm)
    field = spec.response_from if spec is not None else None
    if field is None:
        return [
            (
                seq,
                f"trial.requested names the backend 'data', but arm {arm!r} takes no "
                "responses from data (no response_from): a model's trial has a request",
            )
        ]
    out: list[tuple[int, str]] = []
    if body.get("backend") != "data":
        out.append(
            (
                seq,
                f"arm {arm!r} takes its responses from the item field {field!r}, but "
                f"the trial.requested names the backend {body.get('backend')!r}",
            )
        )
    want = canonical_json({"item": item, "response_from": field, "source": "data"})
    if a.blob(a.blob_ref(seq, "request"), MAX_PARSED_BYTES) != want:
        out.append(
            (
                seq,
                f"the request blob is not the source record of item {item!r} and "
                f"field {field!r} ({want.decode('utf-8')})",
            )
        )
    if response_seq is None:
        return out
    got = a.body(response_seq)
    if got.get("backend") != "data" or got.get("format") != "text":
        out.append(
            (
                response_seq,
                "the trial.responded of a data trial names backend "
                f"{got.get('backend')!r} and format {got.get('format')!r}, "
                "not 'data' and 'text'",
            )
        )
    try:
        text = study.fields(item).get(field)
    except PromptError as exc:
        return [*out, (seq, str(exc))]
    raw = a.blob(a.blob_ref(response_seq, "response"), MAX_PARSED_BYTES)
    if type(text) is not str or raw != text.encode("utf-8"):
        out.append(
            (
                response_seq,
                f"the response is not item {item!r}'s field {field!r} as locked, byte for byte",
            )
        )
    return out
