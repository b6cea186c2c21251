"""The ``preflight`` and ``provenance`` checks (``docs/trials.md`` §2 and §3).

``preflight``: every ``run.preflight`` event has the body ``docs/trials.md`` §3 gives, its
request blob hashes to ``request_sha256`` and carries the locked model id, and it is exactly the
locked request of the scheduled trial it copies (``as_trial``); a response blob it names is
present. ``provenance``: every response (and preflight) whose reported model is neither the
requested id nor a dated snapshot of it is a WARN, not a failure: the record is intact, the
server merely names another model (``docs/trials.md`` §2 says why). Written from the docs alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from verify._archive.requests import _request_problem
from verify._archive.view import Archive
from verify._envelope import is_hex64
from verify._ledgerfile import _State
from verify._reader.files import MAX_PARSED_BYTES
from verify._report import Check

__all__ = ["check_preflight", "check_provenance", "model_matches"]

_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})")

# member -> the types it may have (docs/trials.md §3); "int" excludes booleans
_COMMON: dict[str, tuple[str, ...]] = {
    "check": ("bool",), "backend": ("str",), "url": ("str", "null"), "simulated": ("bool",),
    "package_version": ("str",), "model": ("str",), "shape": ("dict",), "as_trial": ("str",),
    "position": ("int",), "attempt": ("int",), "request_sha256": ("str",), "ok": ("bool",),
    "http_status": ("int", "null"), "latency_ms": ("number", "null"),
}  # fmt: skip
_ANSWERED: dict[str, tuple[str, ...]] = {
    "request_id": ("str", "null"), "reported_model": ("str", "null"),
    "model_match": ("bool", "null"), "stop_reason": ("str", "null"), "usage": ("dict",),
    "cost_usd": ("number", "null"), "format": ("str",),
}  # fmt: skip
_FAILED: dict[str, tuple[str, ...]] = {
    "error_type": ("str",), "message": ("str",), "retryable": ("bool",),
}  # fmt: skip
_SHAPE = {"images": "bool", "system": "bool", "prior_turns": "bool", "parameters": "list"}


def _is(value: object, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "number":
        return type(value) in (int, float)
    return type(value).__name__ == kind


def model_matches(requested: str, reported: str) -> bool:
    """Equal, or ``reported`` is ``requested`` plus ``-YYYYMMDD`` or ``-YYYY-MM-DD``."""
    if reported == requested:
        return True
    return reported.startswith(requested) and bool(
        _SNAPSHOT.fullmatch(reported[len(requested) :])
    )


def _locked_model(a: Archive, trial: str) -> str | None:
    """The model id the protocol requests for ``trial`` (``[models]``: by the id's model part)."""
    models = a.protocol.get("models")
    parts = trial.split("|")
    if type(models) is dict and len(parts) in (4, 5):  # 5: with a variant
        entry = models.get(parts[1])
        found = entry.get("id") if type(entry) is dict else None
    else:
        model = a.protocol.get("model")
        found = model.get("id") if type(model) is dict else None
    return found if type(found) is str else None


def _body_problem(body: dict[str, Any]) -> str | None:
    """How a ``run.preflight`` body departs from ``docs/trials.md`` §3, or ``None``."""
    want = dict(_COMMON)
    ok = body.get("ok")
    want.update(_ANSWERED if ok is True else _FAILED)
    for name, kinds in want.items():
        if name not in body:
            return f"has no {name!r}"
        if not any(_is(body[name], k) for k in kinds):
            return f"{name!r} is {body[name]!r}, not {' or '.join(kinds)}"
    extra = sorted(set(body) - set(want))
    if extra:
        return f"has unexpected member(s) {', '.join(extra)}"
    shape = body["shape"]
    if set(shape) != set(_SHAPE) or not all(_is(shape[k], t) for k, t in _SHAPE.items()):
        return "'shape' is not {images, system, prior_turns: bool, parameters: [str]}"
    if not all(type(p) is str for p in shape["parameters"]):
        return "'shape.parameters' holds a non-string"
    if body["attempt"] < 1 or body["position"] < 1:
        return "'attempt' and 'position' must be at least 1"
    if not is_hex64(body["request_sha256"]):
        return "'request_sha256' is not 64 lowercase hex digits"
    return None


def check_preflight(a: Archive) -> Check:
    """Every ``run.preflight``: its body, its blobs, and the locked request it copies."""
    st = _State("preflight")
    texts, _ = a.arm_texts()
    model = a.protocol.get("model")
    model = model if type(model) is dict else {}
    stimuli: dict[str, bytes | None] = {}
    for path, (role, _, _) in a.locked_files.items():
        if role == "stimulus":
            stimuli[path.rsplit("/", 1)[-1].rsplit(".", 1)[0]] = a.locked_blob(path)
    ids = a.schedule()
    position = {tid: i for i, tid in enumerate(ids, start=1)}
    sealed = a.of_kind("scoring.sealed")
    count = ok = 0
    for seq in a.of_kind("run.preflight"):
        count += 1
        body = a.body(seq)
        problem = _body_problem(body)
        if problem is not None:
            st.fail(f"seq {seq}: run.preflight {problem}", seq)
            continue
        ok += body["ok"]
        if sealed and seq > sealed[0]:
            st.fail(f"seq {seq}: run.preflight after scoring.sealed (seq {sealed[0]}): data "
                    "collection was closed", seq)  # fmt: skip
        ref = a.blob_ref(seq, "request")
        if ref is None or ref != body["request_sha256"]:
            st.fail(f"seq {seq}: request_sha256 {body['request_sha256']} is not the request "
                    f"blob's hash {ref!r}", seq)  # fmt: skip
            continue
        response = a.blob_ref(seq, "response")
        if body["ok"] and response is None:
            st.fail(f"seq {seq}: an answered run.preflight has no response blob", seq)
        if response is not None and not a.blob_ok(response):
            st.fail(f"seq {seq}: response blob {response} is missing or altered", seq,
                    where=f"blobs/{response}")  # fmt: skip
        data = a.blob(ref, MAX_PARSED_BYTES)
        if data is None:
            st.fail(f"seq {seq}: request blob {ref} is missing, too large or altered", seq,
                    where=f"blobs/{ref}")  # fmt: skip
            continue
        try:
            req = json.loads(data)
        except (ValueError, RecursionError):
            req = None
        trial = body["as_trial"]
        locked = _locked_model(a, trial)
        carried = req.get("model") if type(req) is dict else None
        if carried != locked or body["model"] != locked:
            st.fail(f"seq {seq}: the preflight request carries model {carried!r} (body: "
                    f"{body['model']!r}); the locked model is {locked!r}", seq)  # fmt: skip
            continue
        if ids and position.get(trial) != body["position"]:
            st.fail(f"seq {seq}: as_trial {trial!r} at position {body['position']} is not a "
                    "trial of the locked schedule at that place", seq)  # fmt: skip
            continue
        parts = trial.split("|")
        if len(parts) == 3 and parts[0] in texts and stimuli.get(parts[1]) is not None:
            found = _request_problem(req, texts[parts[0]], stimuli[parts[1]] or b"", model)
            if found is not None:
                st.fail(f"seq {seq}: the preflight request is not the locked request of trial "
                        f"{trial}: {found}", seq)  # fmt: skip
    return st.check(
        f"{count} preflight request(s) ({ok} answered) are well formed, carry the locked model "
        "id and are each exactly the locked request of the trial they copy"
    )


def check_provenance(a: Archive) -> Check:
    """WARN for each answer whose reported model is not the requested one (nor its snapshot)."""
    st = _State("provenance")
    compared = unreported = simulated = 0
    for seq in sorted(a.of_kind("trial.responded") + a.of_kind("run.preflight")):
        env = a.envs[seq]
        kind = env.get("kind") if env is not None else None
        body = a.body(seq)
        if body.get("simulated") is True:
            simulated += 1  # the simulation reports "simulated/<id>" and is labelled as such
            continue
        if kind == "trial.responded":
            trial = body.get("trial")
            requested = _locked_model(a, trial) if type(trial) is str else None
            reported = body.get("model")
            what = f"trial {trial}"
        else:
            if body.get("ok") is not True:
                continue
            requested = body.get("model") if type(body.get("model")) is str else None
            reported = body.get("reported_model")
            what = "preflight"
        if requested is None:
            continue
        if type(reported) is not str:
            unreported += 1
            continue
        compared += 1
        if not model_matches(requested, reported):
            st.warn(f"seq {seq} ({what}): the response reports model {reported!r}, the request "
                    f"asked for {requested!r} (not the same model, nor a dated snapshot of it)",
                    seq)  # fmt: skip
    env = a.protocol.get("environment")
    locked_with = (
        f"; protocol.locked records the environment (prompt-ledger "
        f"{env.get('prompt_ledger')}, Python {env.get('python')})"
        if type(env) is dict
        else "; protocol.locked records no environment"
    )
    return st.check(
        f"{compared} answers report the requested model or a dated snapshot of it"
        + (f" ({unreported} report none)" if unreported else "")
        + (f"; {simulated} simulated answers are not compared" if simulated else "")
        + locked_with
    )
