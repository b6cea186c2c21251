"""Arm identity: the hash naming everything an arm's requests carry (``docs/prompts.md`` §3.1).

An arm's *identity object* is built from the ``protocol.locked`` body and the content hashes of
the locked files it names: the arm's own record (components, system components, few-shot set,
sampling, models, replicates, subset, variants, factor levels, ``after``, ``response_from``),
the SHA-256 of every component file it uses (system components included), the item template in
force for it (a factorial cell's level template, else ``[prompt] item``), its few-shot set, the
records of its factor levels, the prompt formats, the model tables it names, the steps and the
variants. ``arms.X.sha256`` is the SHA-256 of the object's RFC 8785 canonical JSON, and the
archive holds those bytes as ``protocol/arms/<X>.json``. Two arms whose requests differ in any of
these never share a hash.

Version 1 (``protocol.locked`` without ``arm_identity``) hashed the arm's own text only, so two
arms that differ by a system prompt or an item template shared a hash; it is still read (and
written for a later phase of a study locked with it), never chosen for a new study.

This module works on plain data, so the lock, ``ledger arms`` and the export derive the same
bytes from the same records. The verifier has its own implementation (``verify/_armid.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from ledger import canonical_json
from runner._errors import StudyError

__all__ = [
    "ARM_IDENTITY_VERSION",
    "IDENTITY_VERSIONS",
    "arm_template",
    "identity_bytes",
    "identity_differences",
    "identity_object",
    "identity_sha256",
    "identity_version",
]

ARM_IDENTITY_VERSION: Final = 2
"""The version a new lock writes as ``protocol.locked`` ``arm_identity``."""
IDENTITY_VERSIONS: Final = (1, 2)
"""The versions this writer reads: 1 (``arm_identity`` absent) and 2."""
_NOT_HASHED: Final = ("role", "sha256")


def identity_version(body: Mapping[str, Any]) -> int:
    """The arm identity version of a ``protocol.locked`` body (1 when it does not say).

    :class:`StudyError` for a version this writer does not know.
    """
    version = body.get("arm_identity", 1)
    if type(version) is not int or version not in IDENTITY_VERSIONS:
        raise StudyError(
            f"protocol.locked arm_identity {version!r} is not one of "
            f"{', '.join(map(str, IDENTITY_VERSIONS))}"
        )
    return version


def arm_template(body: Mapping[str, Any], record: Mapping[str, Any]) -> str | None:
    """The item template in force for an arm (``None`` when there is none).

    Its factor level's ``template``, else the study's ``prompt.item``.
    """
    factors = body.get("factors") or {}
    for factor, level in (record.get("factors") or {}).items():
        for lv in factors[factor]["levels"]:
            if lv["name"] == level and lv.get("template") is not None:
                return str(lv["template"])
    prompt = body.get("prompt") or {}
    item = prompt.get("item")
    return None if item is None else str(item)


def identity_object(
    body: Mapping[str, Any],
    arm: str,
    component_sha256: Callable[[str], str | None],
    file_sha256: Callable[[str], str],
) -> dict[str, Any]:
    """The identity object of ``arm`` (``docs/prompts.md`` §3.1).

    ``body`` is the ``protocol.locked`` body (its arms' ``sha256`` may be absent);
    ``component_sha256(name)`` gives the SHA-256 of a ``[components]`` file (``None`` for the
    reserved ``item`` and ``examples``, which are not files); ``file_sha256(path)`` that of a
    locked file by its study-relative path.
    """
    record = body["arms"][arm]
    out: dict[str, Any] = {
        "arm_identity": ARM_IDENTITY_VERSION,
        "record": {k: v for k, v in record.items() if k not in _NOT_HASHED},
    }
    components: dict[str, str] = {}
    for name in [*record.get("components", []), *record.get("system", [])]:
        digest = component_sha256(name)
        if digest is not None:
            components[name] = digest
    out["components"] = components
    files: dict[str, str] = {}
    template = arm_template(body, record)
    if template is not None:
        out["template"] = template
        files[template] = file_sha256(template)
    if "prompt" in body:
        out["prompt"] = body["prompt"]
    if record.get("fewshot") is not None:
        fewshot = body["fewshot"][record["fewshot"]]
        out["fewshot"] = fewshot
        if fewshot.get("answer") is not None:
            files[fewshot["answer"]] = file_sha256(fewshot["answer"])
    if record.get("factors"):
        out["levels"] = {
            factor: next(lv for lv in body["factors"][factor]["levels"] if lv["name"] == level)
            for factor, level in record["factors"].items()
        }
    if "model" in body:
        out["model"] = body["model"]
    if record.get("models") is not None and "models" in body:
        out["models"] = {name: body["models"][name] for name in record["models"]}
    if "steps" in body:
        out["steps"] = body["steps"]
        for step in body["steps"].values():
            for member in ("template", "schema"):
                if step.get(member) is not None:
                    files[step[member]] = file_sha256(step[member])
    if "variants" in body:
        out["variants"] = body["variants"]
    out["files"] = files
    return out


def identity_bytes(obj: Mapping[str, Any]) -> bytes:
    """The canonical JSON of an identity object: ``protocol/arms/<arm>.json``."""
    return canonical_json(dict(obj))


def identity_sha256(obj: Mapping[str, Any]) -> str:
    """The arm hash: SHA-256 (hex) of :func:`identity_bytes`."""
    return hashlib.sha256(identity_bytes(obj)).hexdigest()


def identity_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What tells two arms' identity objects apart, for ``ledger arms``.

    The record members that differ (``components``, ``system``, ``factors``, ``sampling``,
    ...), then ``item template`` when the templates in force differ. Everything else in an
    identity object is the study's, or follows from one of these.
    """
    ra, rb = a.get("record") or {}, b.get("record") or {}
    out = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
    ta, tb = a.get("template"), b.get("template")
    if ta != tb or (a.get("files") or {}).get(ta) != (b.get("files") or {}).get(tb):
        out.append("item template")
    return out
