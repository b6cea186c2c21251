"""The ``preflight`` and ``provenance`` checks (``docs/trials.md`` §2 and §3).

``preflight``: every ``run.preflight`` event has the body ``docs/trials.md`` §3 gives, its
request blob hashes to ``request_sha256`` and carries the locked model id, and it is exactly the
locked request of the scheduled trial it copies (``as_trial``), or names a step call of a locked
step and that step model's locked id (``as_call``); a response blob it names is present; its
``server_identity`` (when recorded) says ``listed: true`` for exactly the locked ids found among
the models the server named. ``provenance``: every response (and preflight) whose reported model
is neither the requested id nor a dated snapshot of it is a WARN, not a failure: the record is
intact, the server merely names another model (``docs/trials.md`` §2 says why); so is a locked
model the server did not list, or could not be asked about (``server_identity`` of
``run.started`` and ``run.preflight``), and a real backend's session that recorded no
``server_identity`` at all. A reported model id is what the server *reported*, never proof of
which model answered, and the check says so. Written from the docs alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verify._archive.requests import _request_problem
from verify._archive.view import Archive
from verify._envelope import is_hex64
from verify._ledgerfile import _State
from verify._prompts import ANTHROPIC_VERSIONS, wire_form
from verify._reader.files import MAX_PARSED_BYTES
from verify._report import Check

__all__ = [
    "check_preflight",
    "check_provenance",
    "identity_notice",
    "identity_problem",
    "identity_warnings",
    "model_matches",
]

_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})")

# member -> the types it may have (docs/trials.md §3); "int" excludes booleans
_COMMON: dict[str, tuple[str, ...]] = {
    "check": ("bool",),
    "backend": ("str",),
    "url": ("str", "null"),
    "simulated": ("bool",),
    "package_version": ("str",),
    "model": ("str",),
    "shape": ("dict",),
    "attempt": ("int",),
    "request_sha256": ("str",),
    "ok": ("bool",),
    "http_status": ("int", "null"),
    "latency_ms": ("number", "null"),
}
# what the preflight copies: a scheduled trial, or (a study with steps) a step call
_AS_TRIAL: dict[str, tuple[str, ...]] = {"as_trial": ("str",), "position": ("int",)}
_AS_CALL: dict[str, tuple[str, ...]] = {"as_call": ("str",), "step": ("str",)}
# members a later writer adds; absent from older ledgers (docs/ledger-format.md, format notes)
_OPTIONAL: dict[str, tuple[str, ...]] = {"empty_slots": ("list",), "server_identity": ("dict",)}
_OPTIONAL_ANSWERED: dict[str, tuple[str, ...]] = {
    "system_fingerprint": ("str", "null"),
    "headers": ("dict",),
}
_ANSWERED: dict[str, tuple[str, ...]] = {
    "request_id": ("str", "null"),
    "reported_model": ("str", "null"),
    "model_match": ("bool", "null"),
    "stop_reason": ("str", "null"),
    "usage": ("dict",),
    "cost_usd": ("number", "null"),
    "format": ("str",),
}
_FAILED: dict[str, tuple[str, ...]] = {
    "error_type": ("str",),
    "message": ("str",),
    "retryable": ("bool",),
}
_SHAPE = {"images": "bool", "system": "bool", "prior_turns": "bool", "parameters": "list"}


def _is(value: object, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "number":
        return type(value) in (int, float)
    return type(value).__name__ == kind


def _cloud_name(model_id: str) -> str | None:
    """docs/trials.md §2: the Anthropic name a Bedrock or Vertex AI id names, else None.

    Bedrock: ``[GEO.]anthropic.NAME`` with an optional ``-vN`` or ``-vN:M`` version suffix;
    Vertex AI: ``NAME@YYYYMMDD``, which names ``NAME-YYYYMMDD``.
    """
    head, dot, rest = model_id.partition("anthropic.")
    if dot and (head == "" or re.fullmatch(r"[a-z]{2,6}(?:-[a-z]+)?\.", head)) and rest:
        version = re.search(r"-v\d+(?::\d+)?$", rest)
        name = rest[: version.start()] if version else rest
        return name or None
    at = re.fullmatch(r"([^@]+)@(\d{8})", model_id)
    return f"{at.group(1)}-{at.group(2)}" if at else None


def _same_or_snapshot(name: str, reported: str) -> bool:
    return reported == name or (
        reported.startswith(name) and bool(_SNAPSHOT.fullmatch(reported[len(name) :]))
    )


def model_matches(requested: str, reported: str) -> bool:
    """Equal, or ``reported`` is ``requested`` plus ``-YYYYMMDD`` or ``-YYYY-MM-DD``.

    Or, for a Bedrock or Vertex AI id, the same of the Anthropic name it names (docs/trials.md
    §2).
    """
    if _same_or_snapshot(requested, reported):
        return True
    name = _cloud_name(requested)
    return name is not None and _same_or_snapshot(name, reported)


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


def identity_problem(record: Any) -> str | None:
    """How a ``server_identity`` departs from ``docs/trials.md`` §3, or ``None``."""
    if type(record) is not dict or set(record) != {"asked", "models", "listed", "note"}:
        return "'server_identity' is not {asked, models, listed, note}"
    asked, models, listed, note = (record[k] for k in ("asked", "models", "listed", "note"))
    if type(asked) is not list or not all(_is_asked(a) for a in asked):
        return "'server_identity.asked' is not a list of {url, http_status, headers, error}"
    return _types_problem(models, listed, note) or _listed_problem(listed, models)


def _types_problem(models: Any, listed: Any, note: Any) -> str | None:
    """``server_identity``'s models, listed and note are of their types, or say which is not."""
    if models is not None and (type(models) is not list or not all(type(m) is str for m in models)):
        return "'server_identity.models' is neither null nor a list of strings"
    if type(listed) is not dict or not all(v is None or type(v) is bool for v in listed.values()):
        return "'server_identity.listed' is not an object of true, false or null"
    if note is not None and type(note) is not str:
        return "'server_identity.note' is neither null nor a string"
    return None


def _is_asked(a: Any) -> bool:
    """One ``server_identity.asked`` entry: ``{url, http_status, headers, error}``."""
    return (
        type(a) is dict
        and set(a) == {"url", "http_status", "headers", "error"}
        and type(a["url"]) is str
        and (a["http_status"] is None or _is(a["http_status"], "int"))
        and type(a["headers"]) is dict
        and all(type(v) is str for v in a["headers"].values())
        and (a["error"] is None or type(a["error"]) is str)
    )


def _listed_problem(listed: dict[str, Any], models: list[str] | None) -> str | None:
    """``server_identity.listed`` agrees with the models the server named, or says how not."""
    for model_id, value in listed.items():
        found = type(models) is list and any(model_matches(model_id, m) for m in models)
        if (value is True) != found:
            named = "is" if found else "is not"
            return (
                f"'server_identity.listed' says {model_id!r} is {value}, but it {named} "
                f"among the models the server named ({models!r})"
            )
        if value is False and models is None:
            return f"'server_identity.listed' says {model_id!r} is false with no model list"
    return None


def _step_model(a: Archive, call: str, step: str) -> tuple[str | None, str | None]:
    """(the locked model id of step call ``call``, None) or (None, why it is no locked call).

    ``call`` is ``step:{step}|{model}|...`` (``docs/trials.md`` §5): ``step`` a locked step
    (``protocol.locked`` ``steps``), ``model`` one of its models (``""``: the one ``[model]``).
    """
    steps = a.protocol.get("steps")
    spec = steps.get(step) if type(steps) is dict else None
    if type(spec) is not dict:
        return None, f"step {step!r} is not a locked step"
    prefix = f"step:{step}|"
    if not call.startswith(prefix) or "|" not in call[len(prefix) :]:
        return None, f"as_call {call!r} is not a call of step {step!r}"
    name = call[len(prefix) :].split("|", 1)[0]
    models = spec.get("models")
    if type(models) is not list or name not in models:
        return None, f"as_call {call!r} names model {name!r}, not a model of step {step!r}"
    if name == "":
        entry = a.protocol.get("model")
    else:
        table = a.protocol.get("models")
        entry = table.get(name) if type(table) is dict else None
    found = entry.get("id") if type(entry) is dict else None
    return (found, None) if type(found) is str else (None, f"model {name!r} has no locked id")


def _members_problem(body: dict[str, Any]) -> str | None:
    """How a ``run.preflight`` body's members depart from ``docs/trials.md`` §3, or ``None``.

    Each required member present and of its type, each optional one of its type, no other.
    """
    want = dict(_COMMON)
    ok = body.get("ok")
    want.update(_ANSWERED if ok is True else _FAILED)
    want.update(_AS_CALL if "as_call" in body and "as_trial" not in body else _AS_TRIAL)
    optional = dict(_OPTIONAL)
    if ok is True:
        optional.update(_OPTIONAL_ANSWERED)
    for name, kinds in want.items():
        if name not in body:
            return f"has no {name!r}"
        if not any(_is(body[name], k) for k in kinds):
            return f"{name!r} is {body[name]!r}, not {' or '.join(kinds)}"
    for name, kinds in optional.items():
        if name in body and not any(_is(body[name], k) for k in kinds):
            return f"{name!r} is {body[name]!r}, not {' or '.join(kinds)}"
    extra = sorted(set(body) - set(want) - set(optional))
    if extra:
        return f"has unexpected member(s) {', '.join(extra)}"
    return None


def _shape_problem(shape: Any) -> str | None:
    """A preflight's ``shape``: {images, system, prior_turns: bool, parameters: [str]}."""
    if set(shape) != set(_SHAPE) or not all(_is(shape[k], t) for k, t in _SHAPE.items()):
        return "'shape' is not {images, system, prior_turns: bool, parameters: [str]}"
    if not all(type(p) is str for p in shape["parameters"]):
        return "'shape.parameters' holds a non-string"
    return None


def _body_problem(body: dict[str, Any]) -> str | None:
    """How a ``run.preflight`` body departs from ``docs/trials.md`` §3, or ``None``."""
    problem = _members_problem(body)
    if problem is not None:
        return problem
    slots = body.get("empty_slots", ["-"])
    if not slots or not all(type(x) is str for x in slots):
        return "'empty_slots' is not a non-empty list of slot names"
    headers = body.get("headers", {})
    if not all(type(v) is str for v in headers.values()):
        return "'headers' holds a value that is not a string"
    if "server_identity" in body:
        problem = identity_problem(body["server_identity"])
        if problem is not None:
            return problem
    problem = _shape_problem(body["shape"])
    if problem is not None:
        return problem
    if body["attempt"] < 1 or body.get("position", 1) < 1:
        return "'attempt' and 'position' must be at least 1"
    if not is_hex64(body["request_sha256"]):
        return "'request_sha256' is not 64 lowercase hex digits"
    return None


@dataclass(frozen=True)
class _Locked:
    """What a preflight request is compared with: the locked arms, model, stimuli, schedule."""

    texts: dict[str, str]
    model: dict[str, Any]
    stimuli: dict[str, bytes | None]
    ids: list[str]
    position: dict[str, int]
    sealed: list[int]


def _locked(a: Archive) -> _Locked:
    """The locked arm texts, ``model`` table, stimulus bytes by name and schedule."""
    texts, _ = a.arm_texts()
    model = a.protocol.get("model")
    stimuli: dict[str, bytes | None] = {}
    for path, (role, _, _) in a.locked_files.items():
        if role == "stimulus":
            stimuli[path.rsplit("/", 1)[-1].rsplit(".", 1)[0]] = a.locked_blob(path)
    ids = a.schedule()
    return _Locked(
        texts,
        model if type(model) is dict else {},
        stimuli,
        ids,
        {tid: i for i, tid in enumerate(ids, start=1)},
        a.of_kind("scoring.sealed"),
    )


def _request_json(a: Archive, st: _State, seq: int, body: dict[str, Any]) -> tuple[bool, Any]:
    """(whether the request blob was read, its JSON or None); checks both blobs' presence."""
    ref = a.blob_ref(seq, "request")
    if ref is None or ref != body["request_sha256"]:
        st.fail(
            f"seq {seq}: request_sha256 {body['request_sha256']} is not the request "
            f"blob's hash {ref!r}",
            seq,
        )
        return False, None
    response = a.blob_ref(seq, "response")
    if body["ok"] and response is None:
        st.fail(f"seq {seq}: an answered run.preflight has no response blob", seq)
    if response is not None and not a.blob_ok(response):
        st.fail(
            f"seq {seq}: response blob {response} is missing or altered",
            seq,
            where=f"blobs/{response}",
        )
    data = a.blob(ref, MAX_PARSED_BYTES)
    if data is None:
        st.fail(
            f"seq {seq}: request blob {ref} is missing, too large or altered",
            seq,
            where=f"blobs/{ref}",
        )
        return False, None
    try:
        return True, json.loads(data)
    except (ValueError, RecursionError):
        return True, None


def _as_messages(req: Any, body: dict[str, Any]) -> tuple[Any, Any]:
    """(the model the request carries, the request as the Messages request it stands for)."""
    carried = req.get("model") if type(req) is dict else None
    wire = wire_form(body.get("backend"))
    if (
        wire in ANTHROPIC_VERSIONS
        and type(req) is dict
        and "model" not in req
        and req.get("anthropic_version") == ANTHROPIC_VERSIONS[wire]
    ):
        # docs/backends.md: the model travels in the URL; the event names it. Checked
        # below as the Messages request it stands for.
        carried = body.get("model")
        req = {**{k: v for k, v in req.items() if k != "anthropic_version"}, "model": carried}
    return carried, req


def _check_call_model(a: Archive, st: _State, seq: int, body: dict[str, Any], carried: Any) -> None:
    """A step call's preflight (docs/trials.md §3, §5) carries the step's locked model."""
    locked, why = _step_model(a, body["as_call"], body["step"])
    if why is not None:
        st.fail(f"seq {seq}: run.preflight {why}", seq)
    elif carried != locked or body["model"] != locked:
        st.fail(
            f"seq {seq}: the preflight request carries model {carried!r} (body: "
            f"{body['model']!r}); step call {body['as_call']} locks model "
            f"{locked!r}",
            seq,
        )


def _check_trial_request(
    a: Archive, st: _State, lk: _Locked, seq: int, body: dict[str, Any], req: Any, carried: Any
) -> None:
    """A trial's preflight carries its locked model and place, and is its locked request."""
    trial = body["as_trial"]
    locked = _locked_model(a, trial)
    if carried != locked or body["model"] != locked:
        st.fail(
            f"seq {seq}: the preflight request carries model {carried!r} (body: "
            f"{body['model']!r}); the locked model is {locked!r}",
            seq,
        )
        return
    if lk.ids and lk.position.get(trial) != body["position"]:
        st.fail(
            f"seq {seq}: as_trial {trial!r} at position {body['position']} is not a "
            "trial of the locked schedule at that place",
            seq,
        )
        return
    parts = trial.split("|")
    if len(parts) == 3 and parts[0] in lk.texts and lk.stimuli.get(parts[1]) is not None:
        found = _request_problem(req, lk.texts[parts[0]], lk.stimuli[parts[1]] or b"", lk.model)
        if found is not None:
            st.fail(
                f"seq {seq}: the preflight request is not the locked request of trial "
                f"{trial}: {found}",
                seq,
            )


def _check_one(a: Archive, st: _State, lk: _Locked, seq: int, body: dict[str, Any]) -> bool:
    """Check one well-formed ``run.preflight``; return whether it copies a step call."""
    if lk.sealed and seq > lk.sealed[0]:
        st.fail(
            f"seq {seq}: run.preflight after scoring.sealed (seq {lk.sealed[0]}): data "
            "collection was closed",
            seq,
        )
    read, req = _request_json(a, st, seq, body)
    if not read:
        return False
    carried, req = _as_messages(req, body)
    if "as_call" in body:  # a step call's request (docs/trials.md §3, §5)
        _check_call_model(a, st, seq, body, carried)
        return True
    _check_trial_request(a, st, lk, seq, body, req, carried)
    return False


def check_preflight(a: Archive) -> Check:
    """Every ``run.preflight``: its body, its blobs, and the locked request it copies."""
    st = _State("preflight")
    lk = _locked(a)
    count = ok = calls = 0
    for seq in a.of_kind("run.preflight"):
        count += 1
        body = a.body(seq)
        problem = _body_problem(body)
        if problem is not None:
            st.fail(f"seq {seq}: run.preflight {problem}", seq)
            continue
        ok += body["ok"]
        calls += _check_one(a, st, lk, seq, body)
    of_calls = (
        f", {calls} of them of step calls, each naming a locked step model's id" if calls else ""
    )
    return st.check(
        f"{count} preflight request(s) ({ok} answered) are well formed, carry the locked model "
        f"id and are each exactly the locked request of the trial they copy{of_calls}"
    )


def identity_warnings(a: Archive) -> list[tuple[int, str]]:
    """(seq, text) per locked model a real backend's server did not list, or was not asked about.

    From every non-simulated ``run.started`` and answered-or-not ``run.preflight`` that records
    ``server_identity`` (``docs/trials.md`` §3), the first event per (model, what was said);
    and each non-simulated ``run.started`` that records none (written before it was recorded,
    or by a writer that did not ask). Shared by the ``provenance`` check, the report's banner
    and the README's notice, which must all say the same.
    """
    out: list[tuple[int, str]] = []
    said: set[tuple[str, object]] = set()
    for seq in sorted(a.of_kind("run.started") + a.of_kind("run.preflight")):
        body = a.body(seq)
        if body.get("simulated") is True:
            continue
        env = a.envs[seq]
        kind = env.get("kind") if env is not None else None
        record = body.get("server_identity")
        if record is None:
            if kind == "run.started":
                out.append(
                    (
                        seq,
                        f"run.started seq {seq} (backend {body.get('backend')}) records "
                        "no server_identity: the server was not asked which models it "
                        "serves, so which model answered rests on what each response "
                        "reports",
                    )
                )
            continue
        if identity_problem(record) is not None:
            continue  # the preflight check fails it; nothing to read here
        out.extend(_identity_warnings(seq, kind, record, said))
    return out


def _identity_warnings(
    seq: int, kind: Any, record: dict[str, Any], said: set[tuple[str, object]]
) -> list[tuple[int, str]]:
    """(seq, text) per locked model one valid ``server_identity`` did not list or ask about.

    Unless an earlier event said the same of that model (``said``, updated here).
    """
    out: list[tuple[int, str]] = []
    models = record["models"]
    named = (
        ", ".join(repr(m) for m in models[:8]) + (" ..." if len(models) > 8 else "")
        if (models)
        else "none"
    )
    for model_id, value in sorted(record["listed"].items()):
        if value is True or (model_id, value) in said:
            continue
        said.add((model_id, value))
        if value is False:
            out.append(
                (
                    seq,
                    f"{kind} seq {seq}: the locked model {model_id!r} is not among "
                    f"the models the server reports serving (it named: {named}); "
                    "its answers report the model the server says, which proves "
                    "nothing about which model answered",
                )
            )
        else:
            errors = [str(x.get("error")) for x in record["asked"] if x.get("error")]
            why = record["note"] or "; ".join(errors)
            out.append(
                (
                    seq,
                    f"{kind} seq {seq}: the server could not be asked whether it "
                    f"serves the locked model {model_id!r}" + (f" ({why})" if why else ""),
                )
            )
    return out


def identity_notice(a: Archive) -> str | None:
    """The notice the report and README must carry (``docs/trials.md`` §2), or None.

    Read from the ``run.started`` events alone: each real session's ``server_identity``, in
    seq order, each locked id (sorted) it gives as ``false`` or ``null``, the first time that
    is said of that id.
    """
    items: list[str] = []
    said: set[tuple[str, object]] = set()
    for seq in sorted(a.of_kind("run.started")):
        body = a.body(seq)
        record = body.get("server_identity")
        if body.get("simulated") is True or type(record) is not dict:
            continue
        listed = record.get("listed")
        if type(listed) is not dict:
            continue
        for model_id in sorted(listed):
            value = listed[model_id]
            if value is True or (model_id, value) in said:
                continue
            said.add((model_id, value))
            if value is False:
                items.append(
                    f"the server did not list the locked model '{model_id}' among its "
                    f"models (run.started seq {seq})"
                )
            else:
                items.append(
                    f"the server could not be asked whether it serves the locked model "
                    f"'{model_id}' (run.started seq {seq})"
                )
    if not items:
        return None
    return (
        "MODEL IDENTITY NOT CONFIRMED: " + "; ".join(items) + ". A response's model id is "
        "what the server reports, not proof of which model answered."
    )


def _requested_reported(a: Archive, seq: int, body: dict[str, Any]) -> tuple[Any, Any, str]:
    """(model requested, model reported, what) of a trial.responded or a run.preflight.

    The requested model is None when there is nothing to compare.
    """
    if a.envs.kind(seq) == "trial.responded":
        trial = body.get("trial")
        requested = _locked_model(a, trial) if type(trial) is str else None
        return requested, body.get("model"), f"trial {trial}"
    if body.get("ok") is not True:
        return None, None, "preflight"
    requested = body.get("model") if type(body.get("model")) is str else None
    return requested, body.get("reported_model"), "preflight"


def check_provenance(a: Archive) -> Check:
    """WARN for each answer whose reported model is not the requested one (nor its snapshot).

    And for each locked model the server did not list or could not be asked about
    (:func:`identity_warnings`): these come first at their seq. The PASS line says what the
    comparison shows: the ids the server *reported*, not which model answered.
    """
    st = _State("provenance")
    for seq, text in identity_warnings(a):
        st.warn(text, seq)
    listed = 0
    for seq in sorted(a.of_kind("run.started")):
        record = a.body(seq).get("server_identity")
        if type(record) is dict and type(record.get("listed")) is dict:
            listed += sum(v is True for v in record["listed"].values())
    compared = unreported = simulated = 0
    for seq in sorted(a.of_kind("trial.responded") + a.of_kind("run.preflight")):
        body = a.body(seq)
        if body.get("simulated") is True:
            simulated += 1  # the simulation reports "simulated/<id>" and is labelled as such
            continue
        requested, reported, what = _requested_reported(a, seq, body)
        if requested is None:
            continue
        if type(reported) is not str:
            unreported += 1
            continue
        compared += 1
        if not model_matches(requested, reported):
            st.warn(
                f"seq {seq} ({what}): the response reports model {reported!r}, the request "
                f"asked for {requested!r} (not the same model, nor a dated snapshot of it)",
                seq,
            )
    env = a.protocol.get("environment")
    locked_with = (
        f"; protocol.locked records the environment (prompt-ledger "
        f"{env.get('prompt_ledger')}, Python {env.get('python')})"
        if type(env) is dict
        else "; protocol.locked records no environment"
    )
    return st.check(
        f"the server reported the requested model id (or a dated snapshot of it) in "
        f"{compared} answers; a reported id is what the server says, not proof of which model "
        "answered"
        + (f" ({unreported} report none)" if unreported else "")
        + (
            f"; the server listed the locked model id in {listed} (run session, model) pair(s)"
            if listed
            else ""
        )
        + (f"; {simulated} simulated answers are not compared" if simulated else "")
        + locked_with
    )
