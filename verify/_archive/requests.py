"""The ``requests`` check: every request carries exactly the locked prompt, image and model."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._reader.files import MAX_PARSED_BYTES
from verify._report import Check
from verify._safeio import human_bytes

__all__ = ["check_requests"]


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _media_type(data: bytes) -> str | None:
    for magic, media in _MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


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
    image, text = content
    openai = type(image) is dict and image.get("type") == "image_url"
    allowed = {"model", "messages", "max_tokens", "temperature", "top_p"}
    if not openai:
        allowed.add("top_k")
    extra = sorted(set(req) - allowed)
    if extra:
        return f"the request has member(s) {', '.join(extra)} (a system prompt or an addition)"
    want = {"model": model.get("id"), "max_tokens": model.get("max_tokens"),
            "temperature": model.get("temperature"), "top_p": model.get("top_p"),
            "top_k": None if openai else model.get("top_k")}  # fmt: skip
    for name, value in want.items():
        got = req.get(name)
        if (got is None) != (value is None) or (got is not None and (
            type(got) is bool or got != value or (name in ("model",) and type(got) is not str)
        )):  # fmt: skip
            return f"{name} is {got!r}, the locked model says {value!r}"
    if openai:
        url = image.get("image_url", {}).get("url") if type(image) is dict else None
        match = re.fullmatch(r"data:([a-z/]+);base64,(.*)", url or "", re.S)
        media, data = (match.group(1), _b64(match.group(2))) if match else (None, None)
        if set(image) != {"type", "image_url"}:
            return "the image block has unexpected members"
    else:
        source = image.get("source") if type(image) is dict else None
        if type(image) is not dict or image.get("type") != "image" or type(source) is not dict:
            return "the first block is not an image block"
        if set(image) != {"type", "source"} or set(source) != {"type", "media_type", "data"}:
            return "the image block has unexpected members"
        if source.get("type") != "base64":
            return "the image source is not base64"
        media, data = source.get("media_type"), _b64(source.get("data"))
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


def check_requests(a: Archive) -> Check:
    """Every request is exactly the locked arm text, stimulus bytes and model parameters."""
    st = _State("requests")
    texts, problem = a.arm_texts()
    if problem is not None:
        st.fail(f"cannot compose the locked arm texts: {problem}", a.protocol_seq)
    model = a.protocol.get("model")
    model = model if type(model) is dict else {}
    stimuli: dict[str, bytes | None] = {}
    for path, (role, _, _) in a.locked_files.items():
        if role == "stimulus":
            stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            stimuli[stem] = a.locked_blob(path)
    verdicts: dict[tuple[str, str, str], str | None] = {}
    count = 0
    for seq in a.of_kind("trial.requested"):
        count += 1
        body = a.body(seq)
        ref = a.blob_ref(seq, "request")
        if ref is None or body.get("request_sha256") != ref:
            st.fail(f"seq {seq}: request_sha256 {body.get('request_sha256')!r} is not the "
                    f"request blob's hash {ref!r}", seq)  # fmt: skip
            continue
        arm, stim = body.get("arm"), body.get("stimulus")
        key = (ref, str(arm), str(stim))
        if key not in verdicts:
            data = a.blob(ref, MAX_PARSED_BYTES)
            if data is None:
                verdicts[key] = (
                    f"request blob {ref} is missing, larger than "
                    f"{human_bytes(MAX_PARSED_BYTES)} or does not hash to its name"
                )
            elif arm not in texts:
                verdicts[key] = f"arm {arm!r} is not a locked arm"
            elif stimuli.get(str(stim)) is None:
                verdicts[key] = f"stimulus {stim!r} is not a locked stimulus with a blob"
            else:
                try:
                    req = json.loads(data)
                except (ValueError, RecursionError):
                    req = None
                found = _request_problem(req, texts[str(arm)], stimuli[str(stim)] or b"", model)
                verdicts[key] = None if found is None else f"request blob {ref}: {found}"
        verdict = verdicts[key]
        if verdict is not None:
            st.fail(f"seq {seq}: trial {body.get('trial')}: {verdict}", seq)
    return st.check(
        f"{count} requests carry exactly the locked arm text, stimulus bytes and model "
        f"parameters ({len(verdicts)} distinct request bodies)"
    )
